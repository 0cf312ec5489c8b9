package scenario

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/fsm"
)

// checkFunc checks a history within a time limit, as
// porcupine.CheckOperationsVerbose does with Model.
type checkFunc func(ops []porcupine.Operation, limit time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo)

func porcupineCheck(ops []porcupine.Operation, limit time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model, ops, limit)
}

// linearizability is the outcome of checking one history.
type linearizability struct {
	verdict porcupine.CheckResult
	info    porcupine.LinearizationInfo // for the report's visualization
	ops     int
	budgets []time.Duration // the limit of each check run, in order
	took    time.Duration   // all checks together
}

// checkLinearizable checks the history against Model within budget.
// Porcupine gives up when its time runs out (Unknown, typically a history
// with many overlapping operations of unknown outcome checked on a busy
// host); the same history is then checked again from the start within
// recheck, the longer budget, unless recheck is not positive.
func checkLinearizable(check checkFunc, ops []porcupine.Operation, budget, recheck time.Duration) linearizability {
	start := time.Now()
	l := linearizability{ops: len(ops), budgets: []time.Duration{budget}}
	l.verdict, l.info = check(ops, budget)
	if l.verdict == porcupine.Unknown && recheck > 0 {
		l.budgets = append(l.budgets, recheck)
		l.verdict, l.info = check(ops, recheck)
	}
	l.took = time.Since(start)
	return l
}

// record puts the outcome in res: the verdict, and a violation unless the
// history is linearizable; a recheck is logged.
func (l linearizability) record(res *Result, logger hclog.Logger) {
	res.Linearizability, res.CheckTime, res.Rechecked = l.verdict, l.took, l.rechecked()
	if l.rechecked() {
		logger.Warn("linearizability check ran out of time; checked again with a longer budget",
			"ops", l.ops, "budgets", l.budgets, "verdict", l.verdict, "took", l.took)
	}
	if v := l.violation(); v != "" {
		res.Violations = append(res.Violations, v)
	}
}

// rechecked reports whether the first check ran out of time.
func (l linearizability) rechecked() bool { return len(l.budgets) > 1 }

// violation describes a failed check: a history that is not
// linearizable, or one the checker could not judge in any of its budgets
// (a run whose history is not checked proves nothing). It is "" for Ok.
func (l linearizability) violation() string {
	switch l.verdict {
	case porcupine.Ok:
		return ""
	case porcupine.Illegal:
		return "history is not linearizable (see linearizability.html)"
	}
	tries := make([]string, len(l.budgets))
	for i, b := range l.budgets {
		tries[i] = b.String()
	}
	return fmt.Sprintf("linearizability check inconclusive: porcupine did not finish checking %d operations within %s (history.json holds them; a longer check timeout may decide)",
		l.ops, strings.Join(tries, ", then "))
}

// waitConverged waits until a leader serves reads, every server (all must
// be running) has applied the leader's last index, and every server's state
// hashes the same.
func waitConverged(ctx context.Context, h *Harness) error {
	var last error
	for {
		last = convergedOnce(ctx, h)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not converged: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func convergedOnce(ctx context.Context, h *Harness) error {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	li, err := h.Leader(lctx)
	if err != nil {
		return err
	}
	servers := h.Servers()
	want := servers[li].Raft().LastIndex()
	var hash string
	for _, s := range servers {
		if s == nil {
			return errors.New("a server is down")
		}
		if got := s.Raft().AppliedIndex(); got < want {
			return fmt.Errorf("%s applied %d of %d", s.ID(), got, want)
		}
		hs, err := s.State().Hash()
		if err != nil {
			return fmt.Errorf("%s: hash state: %w", s.ID(), err)
		}
		if hash != "" && hs != hash {
			return fmt.Errorf("%s: state hash differs", s.ID())
		}
		hash = hs
	}
	return nil
}

// checkAcknowledged checks that every acknowledged put is in every
// server's history of its intent, at its revision, with its value.
func checkAcknowledged(h *Harness, ops []porcupine.Operation) []string {
	var out []string
	for _, s := range h.Servers() {
		if s == nil {
			out = append(out, "acknowledged writes: a server is down")
			continue
		}
		r := s.State().Read()
		missing := 0
		for _, op := range ops {
			in, res := op.Input.(Input), op.Output.(Output)
			if in.Op != OpPut || res.Unknown || res.Conflict {
				continue
			}
			rec, err := r.IntentAt(in.Name, res.Revision)
			var got string
			if err == nil && rec.Revision == res.Revision {
				doc, derr := rec.Intent()
				if derr == nil {
					got = content(doc)
				}
			}
			if got != in.Value {
				missing++
				if missing <= 5 {
					out = append(out, fmt.Sprintf("acknowledged write lost: %s has no %s=%q at revision %d (%v)", s.ID(), in.Name, in.Value, res.Revision, errOr(err, rec)))
				}
			}
		}
		if missing > 5 {
			out = append(out, fmt.Sprintf("acknowledged writes lost on %s: %d in all", s.ID(), missing))
		}
	}
	return out
}

func errOr(err error, rec *fsm.HistoryRecord) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("found revision %d", rec.Revision)
}

// revisionWatch samples every running server's FSM revision and records
// any that goes backwards. A restarted server is a new instance whose FSM
// is rebuilt from its snapshot and log, so it is tracked afresh.
type revisionWatch struct {
	h *Harness

	mu         sync.Mutex
	last       map[*cluster.Server]uint64 // guarded by mu
	violations []string                   // guarded by mu
	samples    int                        // guarded by mu
}

func (w *revisionWatch) run(ctx context.Context) {
	w.last = map[*cluster.Server]uint64{}
	for ctx.Err() == nil {
		w.sample()
		sleep(ctx, 25*time.Millisecond)
	}
}

func (w *revisionWatch) sample() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.h.Servers() {
		if s == nil {
			continue
		}
		rev := s.State().Read().Revision()
		if prev, ok := w.last[s]; ok && rev < prev {
			w.violations = append(w.violations, fmt.Sprintf("revision went backwards on %s: %d after %d", s.ID(), rev, prev))
		}
		w.last[s] = max(rev, w.last[s])
		w.samples++
	}
}

func (w *revisionWatch) result() ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.violations...), w.samples
}
