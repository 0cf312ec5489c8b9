package journal

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// DesiredResource is one resource of the desired set, as the journal
// keeps it.
type DesiredResource struct {
	// Key identifies the resource on the device (e.g. "intent/id").
	Key string `json:"key"`
	// Digest identifies the resource's desired state; equal digests mean
	// equal desired states.
	Digest string `json:"digest"`
	// Revision is the intent revision the resource last changed at. It is
	// at most the desired set's revision.
	Revision uint64 `json:"revision"`
	// Body is the encoded resource, opaque to the journal.
	Body []byte `json:"body"`
}

// DesiredSet is the device's desired state at one revision.
type DesiredSet struct {
	Revision uint64
	// Resources are sorted by key.
	Resources []DesiredResource
}

// RecordDesired replaces the desired set with resources at revision rev.
// It refuses (*RevisionError) a revision lower than the one already
// recorded or acknowledged; recording the same revision again is allowed.
func (j *Journal) RecordDesired(rev uint64, resources []DesiredResource) error {
	if err := checkResources(rev, resources); err != nil {
		return fmt.Errorf("journal: record desired revision %d: %w", rev, err)
	}
	return j.update(fmt.Sprintf("record desired revision %d", rev), func(tx *bolt.Tx) error {
		if err := checkRevisionLocked(tx, "record desired revision", rev); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketDesired); err != nil {
			return err
		}
		b, err := tx.CreateBucket(bucketDesired)
		if err != nil {
			return err
		}
		for _, r := range resources {
			if err := putJSON(b, []byte(r.Key), r); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketDesiredM).Put(keyRevision, encodeU64(rev))
	})
}

// PatchDesired moves the desired set to revision rev by upserting and
// removing resources, so that the cost follows the size of the delta. It
// refuses regressions like RecordDesired.
func (j *Journal) PatchDesired(rev uint64, upsert []DesiredResource, remove []string) error {
	if err := checkResources(rev, upsert); err != nil {
		return fmt.Errorf("journal: patch desired revision %d: %w", rev, err)
	}
	return j.update(fmt.Sprintf("patch desired revision %d", rev), func(tx *bolt.Tx) error {
		if err := checkRevisionLocked(tx, "patch desired revision", rev); err != nil {
			return err
		}
		b := tx.Bucket(bucketDesired)
		for _, key := range remove {
			if err := b.Delete([]byte(key)); err != nil {
				return err
			}
		}
		for _, r := range upsert {
			if err := putJSON(b, []byte(r.Key), r); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketDesiredM).Put(keyRevision, encodeU64(rev))
	})
}

// checkResources validates a batch of desired resources for revision rev.
func checkResources(rev uint64, resources []DesiredResource) error {
	seen := make(map[string]bool, len(resources))
	for _, r := range resources {
		switch {
		case r.Key == "":
			return fmt.Errorf("resource with empty key")
		case seen[r.Key]:
			return fmt.Errorf("resource %q listed twice", r.Key)
		case r.Digest == "":
			return fmt.Errorf("resource %q has no digest", r.Key)
		case r.Revision > rev:
			return fmt.Errorf("resource %q at revision %d is newer than the set", r.Key, r.Revision)
		}
		seen[r.Key] = true
	}
	return nil
}

// checkRevisionLocked refuses rev when it is below the recorded desired
// revision or the acknowledged one.
func checkRevisionLocked(tx *bolt.Tx, what string, rev uint64) error {
	s, err := readSession(tx)
	if err != nil {
		return err
	}
	have := max(s.AckedRevision, desiredRevision(tx))
	if rev < have {
		return &RevisionError{What: what, Got: rev, Have: have}
	}
	return nil
}

// desiredRevision returns the recorded desired revision, 0 when none.
func desiredRevision(tx *bolt.Tx) uint64 {
	return decodeU64(tx.Bucket(bucketDesiredM).Get(keyRevision))
}

// Desired returns the recorded desired set, its resources in key order;
// revision 0 and no resources before the first RecordDesired.
func (j *Journal) Desired() (DesiredSet, error) {
	var set DesiredSet
	err := j.view("read desired set", func(tx *bolt.Tx) error {
		var err error
		set, err = readDesired(tx)
		return err
	})
	return set, err
}

func readDesired(tx *bolt.Tx) (DesiredSet, error) {
	set := DesiredSet{Revision: desiredRevision(tx)}
	err := tx.Bucket(bucketDesired).ForEach(func(k, v []byte) error {
		var r DesiredResource
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("decode desired resource %q: %w", k, err)
		}
		set.Resources = append(set.Resources, r)
		return nil
	})
	return set, err
}

// DesiredRevision returns the recorded desired revision, 0 when none,
// without reading the resources.
func (j *Journal) DesiredRevision() (uint64, error) {
	var rev uint64
	err := j.view("read desired revision", func(tx *bolt.Tx) error {
		rev = desiredRevision(tx)
		return nil
	})
	return rev, err
}
