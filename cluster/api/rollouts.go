package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Rollout states, the values of RolloutStatus.State (fsm's).
const (
	RolloutProgressing     = "progressing"
	RolloutWaitingApproval = "waiting-approval"
	RolloutPaused          = "paused"
	RolloutCompleted       = "completed"
	RolloutAborted         = "aborted"
	RolloutReverted        = "reverted"
	RolloutSuperseded      = "superseded"
)

// Operator actions on a rollout: POST /v1/rollouts/{name}/{action}.
const (
	RolloutApprove = "approve"
	RolloutPause   = "pause"
	RolloutResume  = "resume"
	RolloutAbort   = "abort"
)

// RolloutCounts are a revision's devices by progress.
type RolloutCounts struct {
	Targeted     int `json:"targeted"`
	Released     int `json:"released"`
	Acknowledged int `json:"acknowledged"`
	Converged    int `json:"converged"`
	Failed       int `json:"failed"`
}

// RolloutWave is one wave of a rollout, as judged now.
type RolloutWave struct {
	// Number counts from 1.
	Number int    `json:"number"`
	Name   string `json:"name"`
	// State is pending, waiting-approval, progressing, done or paused.
	State     string `json:"state"`
	Devices   int    `json:"devices"`
	Released  int    `json:"released"`
	Converged int    `json:"converged"`
	// Failed counts failed, stuck and unhealthy devices; Stuck those of
	// them released longer than the progress deadline.
	Failed int `json:"failed"`
	Stuck  int `json:"stuck"`
	// Unreachable counts released devices not converged and out of
	// contact; they hold no maxParallel slot.
	Unreachable int `json:"unreachable,omitempty"`
	// Approval says the wave waits for an operator's approval before it
	// releases; ApprovedBy is who gave it.
	Approval   bool   `json:"approval,omitempty"`
	ApprovedBy string `json:"approved_by,omitempty"`
	WaitingFor string `json:"waiting_for,omitempty"`
	// SampleFailed names up to five failed devices, with their progress.
	SampleFailed []string `json:"sample_failed,omitempty"`
}

// RolloutStatus answers GET /v1/rollouts/{name}: how the intent's newest
// revision reaches its devices.
type RolloutStatus struct {
	Intent string `json:"intent"`
	// Revision is the revision rolled out; StableRevision the one devices
	// hold until it is released to them (0: none).
	Revision       uint64 `json:"revision"`
	StableRevision uint64 `json:"stable_revision"`
	// State is progressing, waiting-approval, paused, completed, aborted,
	// reverted or superseded; Reason says why.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// WaitingFor says what the rollout waits for, if anything.
	WaitingFor string `json:"waiting_for,omitempty"`
	// Wave is the wave in progress (or the last one), from 1; 0 for an
	// intent without a rollout block.
	Wave      int           `json:"wave"`
	Waves     []RolloutWave `json:"waves"`
	Counts    RolloutCounts `json:"counts"`
	StartedAt *time.Time    `json:"started_at,omitempty"`
	UpdatedAt *time.Time    `json:"updated_at,omitempty"`
	EndedAt   *time.Time    `json:"ended_at,omitempty"`
	// AppliedBy is who applied the revision.
	AppliedBy string `json:"applied_by,omitempty"`
}

// RolloutList answers GET /v1/rollouts: every intent's rollout.
type RolloutList struct {
	// Revision is the cluster revision the listing reflects.
	Revision uint64          `json:"revision"`
	Rollouts []RolloutStatus `json:"rollouts"`
}

// RolloutControl is the body of POST /v1/rollouts/{name}/{action}; every
// field is optional.
type RolloutControl struct {
	// Wave is the wave to approve (from 1); 0 is the one waiting.
	Wave   int    `json:"wave,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Revision, when not 0, must be the revision rolled out: the action
	// is refused (409) if a newer one took over.
	Revision uint64 `json:"revision,omitempty"`
}

// UndoRequest is the body of POST /v1/rollouts/{name}/undo.
type UndoRequest struct {
	// ToRevision is the revision whose document becomes desired again;
	// 0 means the stable revision while a rollout of a newer one is in
	// progress or ended without completing, else the revision before the
	// current one.
	ToRevision uint64 `json:"to_revision,omitempty"`
}

// UndoResponse answers an undo: the new revision, and the revision whose
// document it holds.
type UndoResponse struct {
	WriteResponse
	FromRevision uint64 `json:"from_revision"`
}

// RolloutOutcome is how a revision's rollout ended (or stands).
type RolloutOutcome struct {
	State     string     `json:"state"`
	Reason    string     `json:"reason,omitempty"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// RolloutRevision is one retained revision of an intent.
type RolloutRevision struct {
	Revision  uint64    `json:"revision"`
	Time      time.Time `json:"time"`
	AppliedBy string    `json:"applied_by"`
	Deleted   bool      `json:"deleted,omitempty"`
	// Current marks the intent's current revision.
	Current bool `json:"current,omitempty"`
	// Rollout is how the revision's rollout ended; nil for a deletion, or
	// when the outcome is no longer kept.
	Rollout *RolloutOutcome `json:"rollout,omitempty"`
}

// RolloutHistory answers GET /v1/rollouts/{name}/history, oldest first.
type RolloutHistory struct {
	Intent    string            `json:"intent"`
	Revisions []RolloutRevision `json:"revisions"`
}

// RolloutEvent is one entry of an intent's rollout timeline: a decision
// (release, gate result, pause and its reason, approval, revert) or a
// sample of the revision's counts.
type RolloutEvent struct {
	Time     time.Time `json:"time"`
	Revision uint64    `json:"revision"`
	// Kind is started, release, gate, wave-done, waiting, approved,
	// paused, resumed, aborted, reverted, completed, superseded or sample.
	Kind string `json:"kind"`
	// Wave counts from 1; 0 is the rollout as a whole.
	Wave    int            `json:"wave,omitempty"`
	Message string         `json:"message,omitempty"`
	Devices []string       `json:"devices,omitempty"`
	Counts  *RolloutCounts `json:"counts,omitempty"`
	Actor   string         `json:"actor,omitempty"`
	// Index is the Raft index of the command that recorded the event.
	Index uint64 `json:"index"`
}

// RolloutEvents answers GET /v1/rollouts/{name}/events, oldest first.
type RolloutEvents struct {
	Intent string         `json:"intent"`
	Events []RolloutEvent `json:"events"`
}

// Plan actions, the values of IntentPlan.Action and ResourceChange.Action.
const (
	PlanCreate    = "create"
	PlanUpdate    = "update"
	PlanUnchanged = "unchanged"

	ChangeAdd    = "add"
	ChangeChange = "change"
	ChangeRemove = "remove"
)

// ResourceChange is what applying a document changes of one resource on a
// device, compared with what the device last reported applied.
type ResourceChange struct {
	Key    string `json:"key"`
	Action string `json:"action"`
	// DigestFrom is the digest the device reports applied (empty: none);
	// DigestTo the new document's (empty: removed).
	DigestFrom string `json:"digest_from,omitempty"`
	DigestTo   string `json:"digest_to,omitempty"`
	// DigestDesired is the digest the committed desired state asks of the
	// device now, when it differs from DigestFrom (a change still on its
	// way); "none" when the committed state asks for nothing.
	DigestDesired string `json:"digest_desired,omitempty"`
}

// DevicePlan is one device whose resources the document changes.
type DevicePlan struct {
	ID string `json:"id"`
	// Wave is the wave the device falls in, from 1; 0 without waves.
	Wave    int              `json:"wave,omitempty"`
	Changes []ResourceChange `json:"changes"`
}

// PlanWave is one wave of the new document's rollout and its devices.
type PlanWave struct {
	Number  int    `json:"number"`
	Name    string `json:"name"`
	Devices int    `json:"devices"`
}

// PlanConflict is another intent that manages the same target (a file
// path, a certificate or key path, a simulated resource) on some devices.
type PlanConflict struct {
	// Key is this intent's resource; OtherIntent and OtherKey the other's.
	Key         string `json:"key"`
	OtherIntent string `json:"other_intent"`
	OtherKey    string `json:"other_key"`
	// Target is what both manage, such as "file /etc/motd".
	Target string `json:"target"`
	// Devices counts the devices both select; Sample names up to five.
	Devices int      `json:"devices"`
	Sample  []string `json:"sample"`
}

// IntentPlan is what applying one document would do.
type IntentPlan struct {
	Intent string `json:"intent"`
	// Action is create, update or unchanged (the document equals the
	// current revision's: applying it makes no revision).
	Action          string `json:"action"`
	CurrentRevision uint64 `json:"current_revision,omitempty"`
	// Rollout is "waves" or "immediate" (no rollout block: every device
	// at once).
	Rollout string `json:"rollout"`
	// Targeted counts the devices the new document selects, or the
	// current one does (they lose the intent's resources).
	Targeted int `json:"targeted"`
	// Changed counts the devices whose resources change; Devices lists
	// them, by ID.
	Changed   int            `json:"changed"`
	Devices   []DevicePlan   `json:"devices"`
	Waves     []PlanWave     `json:"waves,omitempty"`
	Conflicts []PlanConflict `json:"conflicts,omitempty"`
}

// Plan answers POST /v1/plan.
type Plan struct {
	// Revision is the cluster revision the plan was made at.
	Revision uint64       `json:"revision"`
	Intents  []IntentPlan `json:"intents"`
}

// Rollouts lists every intent's rollout.
func (c *Client) Rollouts(ctx context.Context, o ReadOptions) (*RolloutList, error) {
	var out RolloutList
	err := c.do(ctx, http.MethodGet, "/v1/rollouts", o.query(), nil, nil, &out)
	return &out, err
}

// Rollout reads the rollout of an intent's newest revision.
func (c *Client) Rollout(ctx context.Context, name string, o ReadOptions) (*RolloutStatus, error) {
	var out RolloutStatus
	err := c.do(ctx, http.MethodGet, "/v1/rollouts/"+url.PathEscape(name), o.query(), nil, nil, &out)
	return &out, err
}

// ControlRollout approves, pauses, resumes or aborts an intent's rollout
// (action is RolloutApprove, RolloutPause, RolloutResume or RolloutAbort)
// and returns its new status.
func (c *Client) ControlRollout(ctx context.Context, name, action string, req RolloutControl) (*RolloutStatus, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var out RolloutStatus
	err = c.do(ctx, http.MethodPost, "/v1/rollouts/"+url.PathEscape(name)+"/"+url.PathEscape(action), nil, jsonHeader(), body, &out)
	return &out, err
}

// UndoRollout makes an earlier document of an intent desired again, as a
// new revision.
func (c *Client) UndoRollout(ctx context.Context, name string, req UndoRequest) (*UndoResponse, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var out UndoResponse
	err = c.do(ctx, http.MethodPost, "/v1/rollouts/"+url.PathEscape(name)+"/undo", nil, jsonHeader(), body, &out)
	return &out, err
}

// RolloutHistory lists an intent's retained revisions and how each
// rollout ended.
func (c *Client) RolloutHistory(ctx context.Context, name string, o ReadOptions) (*RolloutHistory, error) {
	var out RolloutHistory
	err := c.do(ctx, http.MethodGet, "/v1/rollouts/"+url.PathEscape(name)+"/history", ReadOptions{Stale: o.Stale}.query(), nil, nil, &out)
	return &out, err
}

// RolloutEvents reads an intent's rollout timeline; o.Revision, when not
// 0, keeps the events of that revision only.
func (c *Client) RolloutEvents(ctx context.Context, name string, o ReadOptions) (*RolloutEvents, error) {
	var out RolloutEvents
	err := c.do(ctx, http.MethodGet, "/v1/rollouts/"+url.PathEscape(name)+"/events", o.query(), nil, nil, &out)
	return &out, err
}

// Plan asks what applying documents (a YAML or JSON stream) would change,
// committing nothing.
func (c *Client) Plan(ctx context.Context, docs []byte, o ReadOptions) (*Plan, error) {
	var out Plan
	h := http.Header{"Content-Type": {"application/yaml"}}
	err := c.do(ctx, http.MethodPost, "/v1/plan", ReadOptions{Stale: o.Stale}.query(), h, docs, &out)
	return &out, err
}

func jsonHeader() http.Header { return http.Header{"Content-Type": {"application/json"}} }
