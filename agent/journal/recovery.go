package journal

import (
	"time"

	bolt "go.etcd.io/bbolt"
)

// Meta keys of a run's start and end: running is set while an agent runs
// and cleared when it stops cleanly, so the next start knows whether the
// one before crashed or lost power; recovery keeps how the latest such
// start was recovered.
var (
	keyRunning  = []byte("running")
	keyRecovery = []byte("recovery")
)

// Recovery is how an agent recovered at a start that followed a crash or
// a power loss (or found steps in flight).
type Recovery struct {
	At time.Time `json:"at"`
	// Unclean says the agent before did not stop cleanly.
	Unclean bool `json:"unclean"`
	// Total counts the resources desired then; Applied those applied at
	// their desired digest when it stopped.
	Total   int             `json:"total"`
	Applied int             `json:"applied"`
	Steps   []RecoveredStep `json:"steps,omitempty"`
}

// RecoveredStep is a step found in flight and how it was resolved.
type RecoveredStep struct {
	Key    string `json:"key"`
	Digest string `json:"digest"`
	// Outcome is "already applied", "applied again" or "no longer
	// desired"; Child "waited for", "ended" or "" (no process survived).
	Outcome string `json:"outcome"`
	Child   string `json:"child,omitempty"`
}

// Start records that an agent runs from now on, and says whether the one
// before stopped cleanly.
func (j *Journal) Start() (unclean bool, err error) {
	err = j.update("record start", func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		unclean = meta.Get(keyRunning) != nil
		return meta.Put(keyRunning, []byte{1})
	})
	return unclean, err
}

// Stop records a clean stop.
func (j *Journal) Stop() error {
	return j.update("record stop", func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Delete(keyRunning)
	})
}

// Recovery returns the latest recovery recorded; ok is false for none.
func (j *Journal) Recovery() (r Recovery, ok bool, err error) {
	err = j.view("read recovery", func(tx *bolt.Tx) error {
		ok, err = getJSON(tx.Bucket(bucketMeta), keyRecovery, &r)
		return err
	})
	return r, ok, err
}

// SaveRecovery replaces the recovery recorded.
func (j *Journal) SaveRecovery(r Recovery) error {
	return j.update("save recovery", func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketMeta), keyRecovery, r)
	})
}
