package journal

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketOverrides holds the site operators' local overrides: resource key
// → Override (JSON).
var bucketOverrides = []byte("overrides")

// Override is a site operator's pin of a resource's local state: the
// agent leaves the resource as it is on the device (no step, no drift
// correction) until Until, and reports it overridden with the reason.
type Override struct {
	Key    string    `json:"key"`
	Reason string    `json:"reason"`
	Until  time.Time `json:"until"`
	// By is who set it (the local user the agent's socket saw), At when.
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// SetOverride records an override of o.Key, replacing one it had.
func (j *Journal) SetOverride(o Override) error {
	if o.Key == "" {
		return fmt.Errorf("journal: set override: no resource key")
	}
	return j.update(fmt.Sprintf("set override of %q", o.Key), func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketOverrides), []byte(o.Key), o)
	})
}

// ClearOverride drops the override of key; ok is false if it had none.
func (j *Journal) ClearOverride(key string) (ok bool, err error) {
	err = j.update(fmt.Sprintf("clear override of %q", key), func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketOverrides)
		ok = b.Get([]byte(key)) != nil
		return b.Delete([]byte(key))
	})
	return ok, err
}

// Overrides returns every override recorded, by key, expired ones
// included (the reconciler drops those).
func (j *Journal) Overrides() (map[string]Override, error) {
	out := map[string]Override{}
	err := j.view("read overrides", func(tx *bolt.Tx) error {
		return tx.Bucket(bucketOverrides).ForEach(func(k, v []byte) error {
			var o Override
			if err := json.Unmarshal(v, &o); err != nil {
				return fmt.Errorf("decode override %q: %w", k, err)
			}
			out[string(k)] = o
			return nil
		})
	})
	return out, err
}
