package journal

import (
	bolt "go.etcd.io/bbolt"
)

// keySettings is where the meta bucket keeps the settings the control
// plane last sent (the wire encoding of a Settings message; the journal
// does not read it).
var keySettings = []byte("settings")

// Settings returns the settings last saved; ok is false if none were.
func (j *Journal) Settings() (body []byte, ok bool, err error) {
	err = j.view("read settings", func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keySettings); v != nil {
			body, ok = append([]byte(nil), v...), true
		}
		return nil
	})
	return body, ok, err
}

// SaveSettings replaces the saved settings: the control plane's reconcile
// classes, maintenance windows, labels and lock breaks, so that they hold
// offline and after a restart.
func (j *Journal) SaveSettings(body []byte) error {
	return j.update("save settings", func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySettings, body)
	})
}
