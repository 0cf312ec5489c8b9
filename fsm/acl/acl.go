package acl

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// Policy is what a token may do.
type Policy string

const (
	// PolicyRead reads intents, devices, status and cluster membership.
	PolicyRead Policy = "read"
	// PolicyOperator reads, writes and deletes intents, labels, revokes
	// and unlocks devices, writes reconcile classes and maintenance
	// windows, and reads the audit log.
	PolicyOperator Policy = "operator"
	// PolicyAdmin may do everything an operator may, and manage tokens,
	// cluster members and revocations (unrevoking a device), and save and
	// restore snapshots.
	PolicyAdmin Policy = "admin"
	// PolicyEnroll may only enroll a device (once per use), which gets the
	// token's enrollment labels.
	PolicyEnroll Policy = "enroll"
)

// Policies lists every policy, from least to most privileged (enroll,
// which is outside that order, last).
func Policies() []Policy {
	return []Policy{PolicyRead, PolicyOperator, PolicyAdmin, PolicyEnroll}
}

// Valid reports whether p is a known policy.
func (p Policy) Valid() bool { return slices.Contains(Policies(), p) }

// Action is one kind of operator request.
type Action string

const (
	// ActionRead reads intents, devices, status, tokens' public fields
	// and members.
	ActionRead Action = "read"
	// ActionReadAudit reads the audit log.
	ActionReadAudit Action = "read-audit"
	// ActionWriteIntent creates or replaces an intent.
	ActionWriteIntent Action = "write-intent"
	// ActionDeleteIntent deletes an intent.
	ActionDeleteIntent Action = "delete-intent"
	// ActionLabelDevice sets a device's control-plane labels.
	ActionLabelDevice Action = "label-device"
	// ActionRevokeDevice revokes a device.
	ActionRevokeDevice Action = "revoke-device"
	// ActionUnrevokeDevice undoes a revocation.
	ActionUnrevokeDevice Action = "unrevoke-device"
	// ActionManageMembers adds, removes or makes servers leave.
	ActionManageMembers Action = "manage-members"
	// ActionManageTokens creates, lists and revokes tokens.
	ActionManageTokens Action = "manage-tokens"
	// ActionSnapshot saves a snapshot of the whole state (token hashes
	// and the audit log included) or restores one over it.
	ActionSnapshot Action = "snapshot"
	// ActionEnroll enrolls a device.
	ActionEnroll Action = "enroll"
	// ActionUnlockDevice breaks a workload lock held on a device.
	ActionUnlockDevice Action = "unlock-device"
	// ActionConfigure writes cluster-wide configuration: reconcile
	// classes and maintenance windows.
	ActionConfigure Action = "configure"
)

// Actions lists every action.
func Actions() []Action {
	return []Action{
		ActionRead, ActionReadAudit, ActionWriteIntent, ActionDeleteIntent,
		ActionLabelDevice, ActionRevokeDevice, ActionUnrevokeDevice,
		ActionManageMembers, ActionManageTokens, ActionSnapshot, ActionEnroll, ActionConfigure, ActionUnlockDevice,
	}
}

// allowed is the permission table: the policies allowing each action.
var allowed = map[Action][]Policy{
	ActionRead:           {PolicyRead, PolicyOperator, PolicyAdmin},
	ActionReadAudit:      {PolicyOperator, PolicyAdmin},
	ActionWriteIntent:    {PolicyOperator, PolicyAdmin},
	ActionDeleteIntent:   {PolicyOperator, PolicyAdmin},
	ActionLabelDevice:    {PolicyOperator, PolicyAdmin},
	ActionRevokeDevice:   {PolicyOperator, PolicyAdmin},
	ActionUnrevokeDevice: {PolicyAdmin},
	ActionManageMembers:  {PolicyAdmin},
	ActionManageTokens:   {PolicyAdmin},
	ActionSnapshot:       {PolicyAdmin},
	ActionEnroll:         {PolicyEnroll},
	ActionConfigure:      {PolicyOperator, PolicyAdmin},
	ActionUnlockDevice:   {PolicyOperator, PolicyAdmin},
}

// scoped reports whether a scope can narrow the action to the intents or
// devices it covers. Other actions concern the whole cluster, and a scoped
// token may not perform them.
func (a Action) scoped() bool {
	switch a {
	case ActionRead, ActionWriteIntent, ActionDeleteIntent, ActionLabelDevice, ActionRevokeDevice, ActionUnlockDevice:
		return true
	}
	return false
}

// Allows reports whether policy p allows action a, before any scope.
func (p Policy) Allows(a Action) bool { return slices.Contains(allowed[a], p) }

// ErrForbidden is wrapped by every refusal of Grant.
var ErrForbidden = errors.New("forbidden")

// Scope narrows a token to the part of the fleet a label selector names,
// with the semantics of an intent's selector: a device is in scope when it
// carries every label of the scope with the same value, or with any value
// where the scope says "*". A nil or empty scope covers everything.
type Scope map[string]string

// CoversDevice reports whether a device with these labels is in scope.
func (s Scope) CoversDevice(labels map[string]string) bool {
	return (&intent.Intent{Selector: s}).Matches(labels)
}

// CoversSelector reports whether an intent with this selector stays within
// the scope, that is whether every device it can select is in scope: every
// label the scope names must appear in the selector, with the same value
// (a scope value "*" accepts any value, "*" included). A selector that
// omits a scoped label, or says "*" where the scope names a value, could
// select devices outside the scope and is not covered.
//
// That is the selector rule itself, applied to the intent's selector as
// if it were a device's labels.
func (s Scope) CoversSelector(selector map[string]string) bool {
	return s.CoversDevice(selector)
}

// Grant is what a token is allowed: its policy, narrowed by its scope.
type Grant struct {
	Policy Policy
	Scope  Scope
}

// Allow returns nil if the grant allows action a on the whole cluster (an
// unscoped token), or an error wrapping ErrForbidden. A scoped token must
// use AllowIntent or AllowDevice for the actions a scope narrows.
func (g Grant) Allow(a Action) error {
	if err := g.allowPolicy(a); err != nil {
		return err
	}
	if len(g.Scope) > 0 {
		if a.scoped() {
			return fmt.Errorf("%w: %s on the whole cluster needs a token without a scope", ErrForbidden, a)
		}
		return fmt.Errorf("%w: %s is not allowed to a scoped token", ErrForbidden, a)
	}
	return nil
}

// AllowIntent returns nil if the grant allows action a on an intent with
// this selector: the policy allows a, and the selector is within the scope
// (Scope.CoversSelector). For a write that changes the selector, check the
// current selector and the new one.
func (g Grant) AllowIntent(a Action, selector map[string]string) error {
	if err := g.allowScoped(a); err != nil {
		return err
	}
	if !g.Scope.CoversSelector(selector) {
		return fmt.Errorf("%w: the intent's selector %v is not within the token's scope %v", ErrForbidden, selector, map[string]string(g.Scope))
	}
	return nil
}

// AllowDevice returns nil if the grant allows action a on a device with
// these labels: the policy allows a, and the device is in scope. For a
// label change, check the current labels and the new ones.
func (g Grant) AllowDevice(a Action, labels map[string]string) error {
	if err := g.allowScoped(a); err != nil {
		return err
	}
	if !g.Scope.CoversDevice(labels) {
		return fmt.Errorf("%w: the device is not within the token's scope %v", ErrForbidden, map[string]string(g.Scope))
	}
	return nil
}

func (g Grant) allowScoped(a Action) error {
	if err := g.allowPolicy(a); err != nil {
		return err
	}
	if !a.scoped() && len(g.Scope) > 0 {
		return fmt.Errorf("%w: %s is not allowed to a scoped token", ErrForbidden, a)
	}
	return nil
}

func (g Grant) allowPolicy(a Action) error {
	if !g.Policy.Allows(a) {
		return fmt.Errorf("%w: policy %q does not allow %s", ErrForbidden, g.Policy, a)
	}
	return nil
}

// ValidateGrant checks the fields of a token to be created: a known
// policy; a scope only on read and operator tokens (an admin token
// manages tokens, so a scope would not hold it; an enroll token's reach
// is its labels); enrollment labels only on enroll tokens, each a
// concrete value (no "*").
func ValidateGrant(p Policy, scope, enrollLabels map[string]string) error {
	if !p.Valid() {
		return fmt.Errorf("unknown policy %q (want one of %v)", p, Policies())
	}
	if len(scope) > 0 && p != PolicyRead && p != PolicyOperator {
		return fmt.Errorf("a %s token cannot have a scope (only read and operator tokens can)", p)
	}
	if err := checkLabels("scope", scope, true); err != nil {
		return err
	}
	if len(enrollLabels) > 0 && p != PolicyEnroll {
		return fmt.Errorf("only an enroll token assigns labels, not a %s token", p)
	}
	return checkLabels("enrollment label", enrollLabels, false)
}

// CheckDeviceLabels checks labels the control plane assigns to a device:
// non-empty keys and concrete values.
func CheckDeviceLabels(labels map[string]string) error {
	return checkLabels("device label", labels, false)
}

func checkLabels(what string, labels map[string]string, wildcard bool) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		if err := intent.CheckLabel(k, v); err != nil {
			return fmt.Errorf("%s %w", what, err)
		}
		if v == "*" && !wildcard {
			return fmt.Errorf("%s %s: value must be concrete, not \"*\"", what, k)
		}
	}
	return nil
}
