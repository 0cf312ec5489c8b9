package journal

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Applied is what the agent last did to one resource.
type Applied struct {
	Key string `json:"key"`
	// Digest and Revision are those of the last successful step; Digest is
	// empty when no step has succeeded yet.
	Digest   string    `json:"digest,omitempty"`
	Revision uint64    `json:"revision,omitempty"`
	At       time.Time `json:"at,omitzero"`
	// LastError is the error of the last ended step; empty when it
	// succeeded.
	LastError string `json:"lastError,omitempty"`
	// LastStepDigest is the digest of the last step begun, and Attempts
	// the number of steps begun for it (it restarts at 1 when a step for
	// another digest begins). A failing resource has LastError set and
	// Attempts counting its tries, for backoff and reports.
	LastStepDigest string `json:"lastStepDigest,omitempty"`
	Attempts       int    `json:"attempts,omitempty"`
}

// Step is a step begun and not ended: the driver may or may not have
// changed the device.
type Step struct {
	Key      string    `json:"key"`
	Digest   string    `json:"digest"`
	Revision uint64    `json:"revision"`
	BegunAt  time.Time `json:"begunAt"`
	// Seq orders steps across the journal's life.
	Seq uint64 `json:"seq"`
	// Proc is what the step's driver said of the processes it runs (the
	// exec driver): recorded before and as each starts, so that after a
	// crash the agent finds any that survived. Nil for none.
	Proc *StepProcess `json:"proc,omitempty"`
}

// StepProcess identifies the processes of a step: each command carries
// Marker in its environment, and the latest one started is the leader of
// process group PGID, started at Start (clock ticks since boot, Linux's
// /proc/PID/stat; 0 when unknown), which tells it from a later process
// given the same ID.
type StepProcess struct {
	Marker string `json:"marker"`
	PGID   int    `json:"pgid,omitempty"`
	Start  uint64 `json:"start,omitempty"`
}

// SetStepProcess records p on the step in flight for key; ErrNoStep if
// there is none.
func (j *Journal) SetStepProcess(key string, p StepProcess) error {
	return j.update(fmt.Sprintf("record process of step %q", key), func(tx *bolt.Tx) error {
		steps := tx.Bucket(bucketSteps)
		st, err := readStep(steps, key)
		if err != nil {
			return err
		}
		st.Proc = &p
		return putJSON(steps, []byte(key), st)
	})
}

// readStep reads the step in flight for key; ErrNoStep if there is none.
func readStep(steps *bolt.Bucket, key string) (Step, error) {
	var st Step
	ok, err := getJSON(steps, []byte(key), &st)
	if err == nil && !ok {
		err = fmt.Errorf("%w for %q", ErrNoStep, key)
	}
	return st, err
}

// BeginStep durably records that a step bringing key to digest (at
// resource revision rev) is about to run. Call it before the driver's
// Apply and call EndStep after. A step already in flight for key is
// replaced: the caller has re-checked it (see InFlight). A revision lower
// than the one already applied for key is refused (*RevisionError).
func (j *Journal) BeginStep(key, digest string, rev uint64) error {
	if key == "" || digest == "" {
		return fmt.Errorf("journal: begin step: key and digest are required")
	}
	return j.update(fmt.Sprintf("begin step %q", key), func(tx *bolt.Tx) error {
		a, _, err := readApplied(tx, key)
		if err != nil {
			return err
		}
		if rev < a.Revision {
			return &RevisionError{What: fmt.Sprintf("begin step %q at revision", key), Got: rev, Have: a.Revision}
		}
		steps := tx.Bucket(bucketSteps)
		seq, err := steps.NextSequence()
		if err != nil {
			return err
		}
		if a.LastStepDigest != digest {
			a.LastStepDigest, a.Attempts = digest, 0
		}
		a.Attempts++
		if err := putJSON(tx.Bucket(bucketApplied), []byte(key), a); err != nil {
			return err
		}
		return putJSON(steps, []byte(key), Step{Key: key, Digest: digest, Revision: rev, BegunAt: j.stamp(), Seq: seq})
	})
}

// EndStep durably records the outcome of the step in flight for key,
// which must have been begun with the same digest and revision
// (ErrNoStep otherwise). With stepErr nil the applied record moves to
// digest and rev; otherwise it keeps its digest and records the error. The
// step leaves InFlight in the same transaction.
func (j *Journal) EndStep(key, digest string, rev uint64, stepErr error) error {
	return j.update(fmt.Sprintf("end step %q", key), func(tx *bolt.Tx) error {
		steps := tx.Bucket(bucketSteps)
		st, err := readStep(steps, key)
		if err != nil {
			return err
		}
		if st.Digest != digest || st.Revision != rev {
			return fmt.Errorf("%w for %q at digest %s revision %d (in flight: digest %s revision %d)",
				ErrNoStep, key, digest, rev, st.Digest, st.Revision)
		}
		a, _, err := readApplied(tx, key)
		if err != nil {
			return err
		}
		if stepErr == nil {
			a.Digest, a.Revision, a.At, a.LastError = digest, rev, j.stamp(), ""
			if err := keepAppliedBodyLocked(tx, key, digest, rev); err != nil {
				return err
			}
		} else {
			a.LastError = stepErr.Error()
			if a.LastError == "" {
				a.LastError = "step failed"
			}
		}
		if err := steps.Delete([]byte(key)); err != nil {
			return err
		}
		return putJSON(tx.Bucket(bucketApplied), []byte(key), a)
	})
}

// InFlight returns the steps begun and not ended, in the order they began:
// after a crash, the steps whose outcome is unknown. For each, re-read the
// device (the driver's Current and Diff), then end the step with the
// outcome found (EndStep) or begin it again.
func (j *Journal) InFlight() ([]Step, error) {
	var steps []Step
	err := j.view("read in-flight steps", func(tx *bolt.Tx) error {
		var err error
		steps, err = readSteps(tx)
		return err
	})
	return steps, err
}

func readSteps(tx *bolt.Tx) ([]Step, error) {
	var steps []Step
	err := tx.Bucket(bucketSteps).ForEach(func(k, v []byte) error {
		var st Step
		if err := json.Unmarshal(v, &st); err != nil {
			return fmt.Errorf("decode step %q: %w", k, err)
		}
		steps = append(steps, st)
		return nil
	})
	sort.Slice(steps, func(a, b int) bool { return steps[a].Seq < steps[b].Seq })
	return steps, err
}

func readApplied(tx *bolt.Tx, key string) (Applied, bool, error) {
	a := Applied{Key: key}
	ok, err := getJSON(tx.Bucket(bucketApplied), []byte(key), &a)
	return a, ok, err
}

// Applied returns the applied record of key; ok is false when no step was
// ever begun for it.
func (j *Journal) Applied(key string) (a Applied, ok bool, err error) {
	err = j.view(fmt.Sprintf("read applied %q", key), func(tx *bolt.Tx) error {
		a, ok, err = readApplied(tx, key)
		return err
	})
	return a, ok, err
}

// AppliedAll returns every applied record, sorted by key.
func (j *Journal) AppliedAll() ([]Applied, error) {
	var out []Applied
	err := j.view("read applied records", func(tx *bolt.Tx) error {
		return tx.Bucket(bucketApplied).ForEach(func(k, v []byte) error {
			var a Applied
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("decode applied %q: %w", k, err)
			}
			out = append(out, a)
			return nil
		})
	})
	return out, err
}

// ForgetApplied drops the applied record of key, once the resource left
// the desired set and its state was removed or abandoned. A step in
// flight for key is dropped too.
func (j *Journal) ForgetApplied(key string) error {
	return j.update(fmt.Sprintf("forget applied %q", key), func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketSteps).Delete([]byte(key)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketBodies).Delete([]byte(key)); err != nil {
			return err
		}
		return tx.Bucket(bucketApplied).Delete([]byte(key))
	})
}

// Progress is the state of the desired set against the journal, read in
// one transaction.
type Progress struct {
	// Revision is the desired set's revision.
	Revision uint64
	// Applied lists the keys whose last successful step applied the
	// desired digest, with no step in flight.
	Applied []string
	// InFlight lists the steps begun and not ended, for any key.
	InFlight []Step
	// Failed lists the keys whose last step, for the desired digest,
	// ended with an error.
	Failed []string
	// Pending lists the other desired keys: not yet attempted at their
	// desired digest.
	Pending []string
}

// Progress classifies every desired resource: after a crash it says
// exactly which steps were applied, which must be re-checked, and which
// remain.
func (j *Journal) Progress() (Progress, error) {
	var p Progress
	err := j.view("read progress", func(tx *bolt.Tx) error {
		set, err := readDesired(tx)
		if err != nil {
			return err
		}
		if p.InFlight, err = readSteps(tx); err != nil {
			return err
		}
		p.Revision = set.Revision
		inFlight := make(map[string]bool, len(p.InFlight))
		for _, st := range p.InFlight {
			inFlight[st.Key] = true
		}
		for _, r := range set.Resources {
			a, _, err := readApplied(tx, r.Key)
			if err != nil {
				return err
			}
			switch {
			case inFlight[r.Key]:
			case a.Digest == r.Digest:
				p.Applied = append(p.Applied, r.Key)
			case a.LastStepDigest == r.Digest && a.LastError != "":
				p.Failed = append(p.Failed, r.Key)
			default:
				p.Pending = append(p.Pending, r.Key)
			}
		}
		return nil
	})
	return p, err
}

// AppliedBody is the desired resource a successful step applied: the body
// the applied record's digest stands for. The agent needs it when the
// control plane goes back to what is applied while a newer desired body
// was still pending (a rollback of a change that never applied).
type AppliedBody struct {
	Digest   string `json:"digest"`
	Revision uint64 `json:"revision"`
	Body     []byte `json:"body"`
}

// keepAppliedBodyLocked copies the desired body of key into the bodies
// bucket when it is the one the step applied (same digest). A step whose
// body is not in the desired set any more leaves no body.
func keepAppliedBodyLocked(tx *bolt.Tx, key, digest string, rev uint64) error {
	bodies := tx.Bucket(bucketBodies)
	var d DesiredResource
	ok, err := getJSON(tx.Bucket(bucketDesired), []byte(key), &d)
	if err != nil {
		return err
	}
	if !ok || d.Digest != digest {
		return bodies.Delete([]byte(key))
	}
	return putJSON(bodies, []byte(key), AppliedBody{Digest: digest, Revision: rev, Body: d.Body})
}

// AppliedBody returns the body last applied successfully for key; ok is
// false when none is known (never applied, or applied by a journal that
// did not keep bodies).
func (j *Journal) AppliedBody(key string) (b AppliedBody, ok bool, err error) {
	err = j.view(fmt.Sprintf("read applied body %q", key), func(tx *bolt.Tx) error {
		ok, err = getJSON(tx.Bucket(bucketBodies), []byte(key), &b)
		return err
	})
	return b, ok, err
}
