package journal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
)

// FileName is the name of the journal file in the agent's data directory.
const FileName = "journal.db"

// schemaVersion is the layout version written in the meta bucket.
const schemaVersion = 1

// Bucket and key names.
var (
	bucketMeta     = []byte("meta")     // "version" → u64, "nat" → NATBinding (JSON)
	bucketSession  = []byte("session")  // "session" → sessionRecord (JSON)
	bucketReports  = []byte("reports")  // seq (u64) → report body
	bucketDesiredM = []byte("desiredM") // "revision" → u64
	bucketDesired  = []byte("desired")  // key → DesiredResource (JSON)
	bucketApplied  = []byte("applied")  // key → Applied (JSON)
	bucketSteps    = []byte("steps")    // key → Step (JSON)
	bucketBodies   = []byte("bodies")   // key → AppliedBody (JSON)
	bucketTraffic  = []byte("traffic")  // "days" → []TrafficDay (JSON)

	keyVersion  = []byte("version")
	keySession  = []byte("session")
	keyRevision = []byte("revision")
	keyTraffic  = []byte("days")

	allBuckets = [][]byte{bucketMeta, bucketSession, bucketReports, bucketDesiredM, bucketDesired, bucketApplied, bucketSteps, bucketBodies, bucketTraffic,
		bucketOverrides, bucketLocks}
)

var (
	// ErrRevisionRegression is matched (errors.Is) by every refusal to go
	// back to an older revision; the error is a *RevisionError.
	ErrRevisionRegression = errors.New("revision regression")
	// ErrNoStep is returned by EndStep when no matching step is in flight.
	ErrNoStep = errors.New("no matching step in flight")
	// ErrUnsupportedVersion is returned by Open for a journal written by a
	// newer agent.
	ErrUnsupportedVersion = errors.New("unsupported journal version")
)

// RevisionError is a refused revision regression. It matches
// ErrRevisionRegression.
type RevisionError struct {
	// What names the refused operation, e.g. "record desired revision".
	What string
	// Got is the refused revision; Have the one it may not go below.
	Got, Have uint64
}

func (e *RevisionError) Error() string {
	return fmt.Sprintf("%s %d: %v: already at %d", e.What, e.Got, ErrRevisionRegression, e.Have)
}

// Unwrap makes errors.Is(err, ErrRevisionRegression) true.
func (e *RevisionError) Unwrap() error { return ErrRevisionRegression }

// Options configures Open.
type Options struct {
	// Logger receives debug logs; nil means none.
	Logger hclog.Logger
	// Now stamps applied records and steps; nil means time.Now.
	Now func() time.Time
	// LockTimeout bounds how long Open waits for another process holding
	// the journal file; zero means 5s.
	LockTimeout time.Duration
}

// Journal is an open journal file. Close it when done.
type Journal struct {
	db     *bolt.DB
	path   string
	now    func() time.Time
	logger hclog.Logger
	cut    atomic.Bool // PowerCut was called
	// gen counts committed writes; it is the key of the summary cache.
	gen atomic.Uint64

	sumMu  sync.Mutex
	sum    Summary // guarded by sumMu; as of sumGen
	sumGen uint64  // guarded by sumMu; 0: nothing cached
}

// ErrPowerCut is the error of every write after PowerCut.
var ErrPowerCut = errors.New("power cut: nothing more is written")

// PowerCut makes every later write fail without touching the file, as if
// the device lost power at this instant: what was committed stays, what
// was about to be is lost. The fleet simulator uses it to cut power in
// the middle of a step; reads still work, so the agent can wind down.
func (j *Journal) PowerCut() { j.cut.Store(true) }

// Open opens (creating if needed) dir/journal.db. dir is created with mode
// 0700 when missing.
func Open(dir string, opts Options) (*Journal, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 5 * time.Second
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	path := filepath.Join(dir, FileName)
	// NoSync stays false: every commit is fsynced.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyVersion); v != nil {
			if got := decodeU64(v); got > schemaVersion {
				return fmt.Errorf("%w: file has version %d, this agent reads up to %d", ErrUnsupportedVersion, got, schemaVersion)
			}
			return nil
		}
		return meta.Put(keyVersion, encodeU64(schemaVersion))
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	j := &Journal{db: db, path: path, now: opts.Now, logger: opts.Logger.Named("journal")}
	j.logger.Debug("opened", "path", path)
	return j, nil
}

// Path returns the journal file's path.
func (j *Journal) Path() string { return j.path }

// Close closes the journal file. Every completed call is already durable;
// Close adds nothing to durability.
func (j *Journal) Close() error {
	if err := j.db.Close(); err != nil {
		return fmt.Errorf("close journal %s: %w", j.path, err)
	}
	return nil
}

// update runs fn in a write transaction, committed with fsync.
func (j *Journal) update(what string, fn func(tx *bolt.Tx) error) error {
	if j.cut.Load() {
		return fmt.Errorf("journal: %s: %w", what, ErrPowerCut)
	}
	err := j.db.Update(fn)
	// Counted whatever the outcome: a failed commit may still have
	// changed what a reader sees, and a needless re-read costs little.
	j.gen.Add(1)
	if err != nil {
		return fmt.Errorf("journal: %s: %w", what, err)
	}
	return nil
}

// view runs fn in a read transaction.
func (j *Journal) view(what string, fn func(tx *bolt.Tx) error) error {
	if err := j.db.View(fn); err != nil {
		return fmt.Errorf("journal: %s: %w", what, err)
	}
	return nil
}

// stamp returns the current time as stored: UTC, without monotonic reading.
func (j *Journal) stamp() time.Time { return j.now().UTC().Round(0) }

func encodeU64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func decodeU64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// getJSON decodes the value at key into v; ok is false when absent.
func getJSON(b *bolt.Bucket, key []byte, v any) (ok bool, err error) {
	raw := b.Get(key)
	if raw == nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("decode record %q: %w", key, err)
	}
	return true, nil
}

// putJSON encodes v at key.
func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return b.Put(key, raw)
}
