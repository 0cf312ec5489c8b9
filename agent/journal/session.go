package journal

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Session is the agent's side of its session with the control plane. A
// session outlives connections; the journal keeps it across restarts so
// that the agent resumes instead of resyncing.
type Session struct {
	// ID and ResumeToken are what the server handed out; empty before the
	// first session.
	ID          string `json:"id,omitempty"`
	ResumeToken []byte `json:"resumeToken,omitempty"`
	// AckedRevision is the highest desired revision acknowledged to the
	// control plane. It only grows, across sessions too.
	AckedRevision uint64 `json:"ackedRevision"`
	// LastReportSeq is the sequence number of the last report queued (and
	// so sent or to be sent); AckedReportSeq the highest one a server
	// acknowledged. Sequence numbers only grow, across sessions too.
	LastReportSeq  uint64 `json:"lastReportSeq"`
	AckedReportSeq uint64 `json:"ackedReportSeq"`
}

// Report is a queued report awaiting acknowledgement.
type Report struct {
	Seq  uint64
	Body []byte
}

// Session returns the stored session; the zero Session before any.
func (j *Journal) Session() (Session, error) {
	var s Session
	err := j.view("read session", func(tx *bolt.Tx) error {
		var err error
		s, err = readSession(tx)
		return err
	})
	return s, err
}

func readSession(tx *bolt.Tx) (Session, error) {
	var s Session
	_, err := getJSON(tx.Bucket(bucketSession), keySession, &s)
	return s, err
}

func writeSession(tx *bolt.Tx, s Session) error {
	return putJSON(tx.Bucket(bucketSession), keySession, s)
}

// SetSession records a new or resumed session's ID and resume token. The
// acknowledged revision and report sequence numbers are kept.
func (j *Journal) SetSession(id string, resumeToken []byte) error {
	return j.update("set session", func(tx *bolt.Tx) error {
		s, err := readSession(tx)
		if err != nil {
			return err
		}
		s.ID, s.ResumeToken = id, bytes.Clone(resumeToken)
		return writeSession(tx, s)
	})
}

// AckRevision records that desired revision rev was acknowledged to the
// control plane. rev must not be lower than the revision already
// acknowledged (*RevisionError) nor higher than the recorded desired
// revision (the agent acknowledges only what it has durably recorded).
// Acknowledging the same revision again is a no-op.
func (j *Journal) AckRevision(rev uint64) error {
	return j.update("ack revision", func(tx *bolt.Tx) error {
		s, err := readSession(tx)
		if err != nil {
			return err
		}
		if rev < s.AckedRevision {
			return &RevisionError{What: "acknowledge revision", Got: rev, Have: s.AckedRevision}
		}
		if desired := desiredRevision(tx); rev > desired {
			return fmt.Errorf("acknowledge revision %d: only revision %d is recorded", rev, desired)
		}
		if rev == s.AckedRevision {
			return nil
		}
		s.AckedRevision = rev
		return writeSession(tx, s)
	})
}

// QueueReport stores body as the next report and returns its sequence
// number. The report stays pending until AckReports covers it.
func (j *Journal) QueueReport(body []byte) (seq uint64, err error) {
	err = j.update("queue report", func(tx *bolt.Tx) error {
		s, err := readSession(tx)
		if err != nil {
			return err
		}
		s.LastReportSeq++
		seq = s.LastReportSeq
		if err := tx.Bucket(bucketReports).Put(encodeU64(seq), body); err != nil {
			return err
		}
		return writeSession(tx, s)
	})
	return seq, err
}

// AckReports drops the pending reports with sequence numbers up to and
// including upTo. A late or repeated acknowledgement below AckedReportSeq
// is a no-op; acknowledging a report never queued is an error.
func (j *Journal) AckReports(upTo uint64) error {
	return j.update("ack reports", func(tx *bolt.Tx) error {
		s, err := readSession(tx)
		if err != nil {
			return err
		}
		if upTo > s.LastReportSeq {
			return fmt.Errorf("acknowledge report %d: last queued is %d", upTo, s.LastReportSeq)
		}
		if upTo <= s.AckedReportSeq {
			return nil
		}
		c := tx.Bucket(bucketReports).Cursor()
		for k, _ := c.First(); k != nil && decodeU64(k) <= upTo; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		s.AckedReportSeq = upTo
		return writeSession(tx, s)
	})
}

// Summary is what an agent's status shows of its journal: the session and
// how many reports await acknowledgement.
type Summary struct {
	Session        Session
	PendingReports int
}

// Summary returns the session and the number of pending reports. It reads
// the file only after a write: the agent's status is sampled far more
// often than the journal changes (the fleet simulator samples every
// agent five times a second).
func (j *Journal) Summary() (Summary, error) {
	gen := j.gen.Load() + 1 // + 1: 0 means nothing cached
	j.sumMu.Lock()
	defer j.sumMu.Unlock()
	if j.sumGen == gen {
		return j.sum, nil
	}
	var sum Summary
	err := j.view("read summary", func(tx *bolt.Tx) error {
		var err error
		if sum.Session, err = readSession(tx); err != nil {
			return err
		}
		sum.PendingReports = tx.Bucket(bucketReports).Stats().KeyN
		return nil
	})
	if err != nil {
		return Summary{}, err
	}
	// Labelled with the count read before the read: a write that
	// commits meanwhile moves the count on, and the next call reads again.
	j.sum, j.sumGen = sum, gen
	return sum, nil
}

// PendingReports returns the reports not yet acknowledged, oldest first,
// for resending after a reconnect.
func (j *Journal) PendingReports() ([]Report, error) {
	var out []Report
	err := j.view("read pending reports", func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReports).ForEach(func(k, v []byte) error {
			out = append(out, Report{Seq: decodeU64(k), Body: bytes.Clone(v)})
			return nil
		})
	})
	return out, err
}

// ReplaceReports stores body as the next report and drops every pending
// one, for reports that supersede all earlier ones (full reports). The new
// sequence number is above both the last one queued and after, so a server
// that already applied reports up to after (its accepted seq) applies this
// one. It returns the new sequence number.
func (j *Journal) ReplaceReports(after uint64, body []byte) (seq uint64, err error) {
	err = j.update("replace reports", func(tx *bolt.Tx) error {
		s, err := readSession(tx)
		if err != nil {
			return err
		}
		b := tx.Bucket(bucketReports)
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		s.LastReportSeq = max(s.LastReportSeq, after) + 1
		seq = s.LastReportSeq
		if err := b.Put(encodeU64(seq), body); err != nil {
			return err
		}
		return writeSession(tx, s)
	})
	return seq, err
}
