package journal

import (
	"time"

	bolt "go.etcd.io/bbolt"
)

// keyNAT is where the meta bucket keeps the NAT binding the agent learned.
var keyNAT = []byte("nat")

// NATBinding is what the agent learned of its path's NAT binding (see the
// agent's keep-alives): the longest silence verified and when, and the
// shortest that failed and when (zero: none).
type NATBinding struct {
	Verified   time.Duration `json:"verified"`
	VerifiedAt time.Time     `json:"verifiedAt"`
	Failed     time.Duration `json:"failed,omitempty"`
	FailedAt   time.Time     `json:"failedAt,omitempty"`
	Tests      int           `json:"tests"`
}

// NATBinding returns the NAT binding last saved; ok is false if none was.
func (j *Journal) NATBinding() (b NATBinding, ok bool, err error) {
	err = j.view("read NAT binding", func(tx *bolt.Tx) error {
		ok, err = getJSON(tx.Bucket(bucketMeta), keyNAT, &b)
		return err
	})
	return b, ok, err
}

// SaveNATBinding replaces the saved NAT binding. The agent saves it when a
// binding test concludes: a few times in its life.
func (j *Journal) SaveNATBinding(b NATBinding) error {
	return j.update("save NAT binding", func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketMeta), keyNAT, b)
	})
}
