package journal

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketLocks holds the workload locks taken through the agent's control
// socket: lock name → Lock (JSON).
var bucketLocks = []byte("locks")

// keyUnlocks is where the meta bucket keeps what became of the lock
// breaks the control plane ordered (UnlockLog).
var keyUnlocks = []byte("unlocks")

// Lock is a workload lock taken through the agent: while it is held, the
// steps that require it wait.
type Lock struct {
	Name   string `json:"name"`
	Holder string `json:"holder"`
	// Since is when it was taken; MaxHold how long it may be held before
	// it is stale (0: no limit).
	Since   time.Time     `json:"since"`
	MaxHold time.Duration `json:"maxHold,omitempty"`
	// By is the local user who took it, as the control socket saw them.
	By string `json:"by,omitempty"`
}

// ErrLockHeld is returned by AcquireLock for a lock already held.
var ErrLockHeld = fmt.Errorf("lock held")

// AcquireLock takes l, unless a lock of its name is held (an error
// wrapping ErrLockHeld, naming the holder).
func (j *Journal) AcquireLock(l Lock) error {
	return j.update(fmt.Sprintf("acquire lock %q", l.Name), func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLocks)
		var cur Lock
		if ok, err := getJSON(b, []byte(l.Name), &cur); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("%w: %q by %s since %s", ErrLockHeld, cur.Name, cur.Holder, cur.Since.UTC().Format(time.RFC3339))
		}
		return putJSON(b, []byte(l.Name), l)
	})
}

// ReleaseLock drops the lock name if it is held and, when since is not
// zero, was taken at since (a release, or a break, of that acquisition
// only). ok says whether it dropped one; cur is the lock found.
func (j *Journal) ReleaseLock(name string, since time.Time) (cur Lock, ok bool, err error) {
	err = j.update(fmt.Sprintf("release lock %q", name), func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLocks)
		found, err := getJSON(b, []byte(name), &cur)
		if err != nil || !found || !since.IsZero() && !cur.Since.Equal(since) {
			return err
		}
		ok = true
		return b.Delete([]byte(name))
	})
	return cur, ok, err
}

// Locks returns the locks taken through the agent, by name.
func (j *Journal) Locks() (map[string]Lock, error) {
	out := map[string]Lock{}
	err := j.view("read locks", func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
			var l Lock
			if err := json.Unmarshal(v, &l); err != nil {
				return fmt.Errorf("decode lock %q: %w", k, err)
			}
			out[string(k)] = l
			return nil
		})
	})
	return out, err
}

// UnlockLog is what became of the lock breaks the control plane ordered:
// the highest order handled (orders are numbered by Raft index) and the
// latest results, which reports carry.
type UnlockLog struct {
	Last    uint64         `json:"last"`
	Results []UnlockResult `json:"results,omitempty"`
}

// UnlockResult is the outcome of one lock break: "broken", "not held" or
// "taken again since".
type UnlockResult struct {
	Index   uint64    `json:"index"`
	Lock    string    `json:"lock"`
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
}

// MaxUnlockResults bounds UnlockLog.Results.
const MaxUnlockResults = 16

// Unlocks returns the unlock log.
func (j *Journal) Unlocks() (UnlockLog, error) {
	var l UnlockLog
	err := j.view("read unlocks", func(tx *bolt.Tx) error {
		_, err := getJSON(tx.Bucket(bucketMeta), keyUnlocks, &l)
		return err
	})
	return l, err
}

// RecordUnlock records the outcome of the order r.Index, which must be
// above every order handled.
func (j *Journal) RecordUnlock(r UnlockResult) error {
	return j.update(fmt.Sprintf("record unlock %d", r.Index), func(tx *bolt.Tx) error {
		var l UnlockLog
		if _, err := getJSON(tx.Bucket(bucketMeta), keyUnlocks, &l); err != nil {
			return err
		}
		if r.Index <= l.Last {
			return fmt.Errorf("unlock %d: already at %d", r.Index, l.Last)
		}
		l.Last = r.Index
		l.Results = append(l.Results, r)
		if n := len(l.Results); n > MaxUnlockResults {
			l.Results = l.Results[n-MaxUnlockResults:]
		}
		return putJSON(tx.Bucket(bucketMeta), keyUnlocks, l)
	})
}
