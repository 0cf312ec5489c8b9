package intent

import "time"

// Intent is a named, versioned document an operator applies: the resources
// that devices matching Selector must hold, and how to roll them out.
//
// The zero value is not valid; build intents with Parse or fill every
// required field and call Validate.
type Intent struct {
	// Name identifies the intent cluster-wide. It is a DNS label:
	// lower-case letters, digits and '-', at most 63 characters.
	Name string `json:"name" yaml:"name"`

	// Selector picks devices by label. A device matches when it carries
	// every label listed here with the same value; the value "*" matches
	// any value as long as the label is present. An empty selector matches
	// every device.
	Selector map[string]string `json:"selector,omitempty" yaml:"selector,omitempty"`

	// Resources is the declarative state the intent asks for, in document
	// order. Resource IDs are unique within an intent.
	Resources []Resource `json:"resources" yaml:"resources"`

	// Rollout is the rollout block as written: how the devices move to a
	// new revision in waves, gates and windows. Validate checks it against
	// the rollout rules, and RolloutSpec gives its typed view (Rollout)
	// with defaults filled in. Nil means no rollout: every device gets a
	// new revision at once.
	Rollout map[string]any `json:"rollout,omitempty" yaml:"rollout,omitempty"`
}

// Resource is one unit of state on a device, handled by the driver named by
// Type. Applying a resource is idempotent: it means "bring to this state",
// never "run this once".
type Resource struct {
	// ID is unique within its intent (a DNS label).
	ID string `json:"id" yaml:"id"`
	// Type names the agent driver: file, exec, certificate or sim.
	Type string `json:"type" yaml:"type"`
	// Class names the reconcile class (cadence and risk profile). Empty
	// means DefaultClass.
	Class string `json:"class,omitempty" yaml:"class,omitempty"`
	// Spec is the driver-specific desired state.
	Spec map[string]any `json:"spec" yaml:"spec"`
	// Probe is the driver-specific effective-state check; nil means the
	// driver's default probe.
	Probe map[string]any `json:"probe,omitempty" yaml:"probe,omitempty"`
	// Drift is the policy when the device's state moves away from the
	// applied one: correct (default), tolerate or report.
	Drift string `json:"drift,omitempty" yaml:"drift,omitempty"`
	// Requires lists IDs of resources of the same intent that must be
	// applied (and effective) before this one, and preconditions on the
	// device (lock:NAME, label:KEY=VALUE, disk:PATH>=SIZE; see
	// ParseRequirement).
	Requires []string `json:"requires,omitempty" yaml:"requires,omitempty"`
	// Rotation, if set, is the window a change of the resource is
	// applied in: not before its NotBefore, and by its Deadline, which
	// the servers watch (deadline-at-risk, deadline-missed).
	Rotation *Rotation `json:"rotation,omitempty" yaml:"rotation,omitempty"`
	// Disruptive marks a resource whose step interrupts the site (a
	// service restart, an exec step that stops a till): a device takes it,
	// and corrects its drift, only while one of its maintenance windows is
	// open (a device no window selects is not held).
	Disruptive bool `json:"disruptive,omitempty" yaml:"disruptive,omitempty"`
}

// Rotation is a resource's rotation window: RFC 3339 times, either of
// which may be empty. A device does not apply a change of the resource
// before NotBefore (by its own clock); a device that has not applied it
// by Deadline missed it, and one that will not at its current rate (its
// link's history and the class's backoff) is at risk of missing it. A
// device applies a change after its deadline all the same.
type Rotation struct {
	NotBefore string `json:"notBefore,omitempty" yaml:"notBefore,omitempty"`
	Deadline  string `json:"deadline,omitempty" yaml:"deadline,omitempty"`
}

// Times returns the window's times; a time not given (or, in a resource
// that was not validated, not RFC 3339) is zero.
func (w *Rotation) Times() (notBefore, deadline time.Time) {
	if w == nil {
		return
	}
	notBefore, _ = time.Parse(time.RFC3339, w.NotBefore)
	deadline, _ = time.Parse(time.RFC3339, w.Deadline)
	return
}

// Built-in resource types, the values of Resource.Type.
const (
	TypeFile        = "file"
	TypeExec        = "exec"
	TypeCertificate = "certificate"
	TypeSim         = "sim"
)

// Drift policies, the values of Resource.Drift. An empty Drift means
// DriftCorrect.
const (
	// DriftCorrect re-applies the resource when the device drifts.
	DriftCorrect = "correct"
	// DriftTolerate records the local change as an expected override.
	DriftTolerate = "tolerate"
	// DriftReport flags the drift without touching the device.
	DriftReport = "report"
)

// DefaultClass is the reconcile class of a resource that names none.
const DefaultClass = "default"

// Limits on intent documents.
const (
	// MaxDocumentSize bounds the input of Parse and ParseAll, and the
	// Canonical encoding of a valid intent, in bytes.
	MaxDocumentSize = 1 << 20
	// MaxStringSize bounds every string value in Spec, Probe and Rollout,
	// in bytes.
	MaxStringSize = 256 << 10
	// MaxResources bounds the number of resources in one intent.
	MaxResources = 256
)

// Matches reports whether a device with the given labels is selected by
// the intent: every selector label must be present with the same value,
// or with any value when the selector says "*". An empty selector matches
// every device.
func (in *Intent) Matches(labels map[string]string) bool {
	for key, want := range in.Selector {
		got, ok := labels[key]
		if !ok || (want != "*" && got != want) {
			return false
		}
	}
	return true
}

// EffectiveClass returns the resource's reconcile class, DefaultClass when
// none is set.
func (r *Resource) EffectiveClass() string {
	if r.Class == "" {
		return DefaultClass
	}
	return r.Class
}

// EffectiveDrift returns the resource's drift policy, DriftCorrect when none
// is set.
func (r *Resource) EffectiveDrift() string {
	if r.Drift == "" {
		return DriftCorrect
	}
	return r.Drift
}
