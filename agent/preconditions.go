package agent

import (
	"fmt"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
	"github.com/meteor-edge/meteor/wire"
)

// unmet checks the preconditions of it (its requires entries of kind
// lock, label and disk) and returns why a step must wait, with its hold,
// for the first that does not hold; "" when all do. locks are the locks
// held now; labels are the device's control-plane labels (its own until
// the control plane sent them).
func (r *reconciler) unmet(it *item, locks map[string]heldLock, labels map[string]string, now time.Time) (string, wire.Hold) {
	for _, q := range it.pre {
		switch q.Kind {
		case intent.RequireLock:
			if l, held := locks[q.Name]; held {
				return "waits for " + l.text(now), l.hold()
			}
		case intent.RequireLabel:
			if v, ok := labels[q.Name]; !ok || v != q.Value {
				has := "it has none"
				if ok {
					has = "it has " + q.Name + "=" + v
				}
				why := fmt.Sprintf("requires label %s=%s; %s", q.Name, q.Value, has)
				return why, wire.Hold{Kind: wire.HoldPrecondition, Note: why}
			}
		case intent.RequireDisk:
			free, err := freeBytes(r.diskPath(q.Name))
			var why string
			switch {
			case err != nil:
				why = fmt.Sprintf("requires %s free on %s; cannot tell: %v", intent.FormatBytes(q.Bytes), q.Name, err)
			case free < q.Bytes:
				why = fmt.Sprintf("requires %s free on %s; it has %s", intent.FormatBytes(q.Bytes), q.Name, humanBytes(free))
			default:
				continue
			}
			return why, wire.Hold{Kind: wire.HoldPrecondition, Note: why}
		}
	}
	return "", wire.Hold{}
}

// diskPath is where a disk requirement's path is on this device: beneath
// Config.Root when the agent confines its paths there.
func (r *reconciler) diskPath(p string) string {
	if r.cfg.Root != "" {
		return r.cfg.Root + p
	}
	return p
}

// deviceLabels are the labels preconditions are checked against: the
// control plane's, once it sent them; until then the agent's own.
func (r *reconciler) deviceLabels() map[string]string {
	if s := r.book.settings(); s != nil {
		return s.Labels
	}
	return r.cfg.Labels
}

// humanBytes writes a size in the largest binary unit, one decimal.
func humanBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
