package cluster

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// Bounds of the Raft log cache (logCache).
const (
	// logCacheEntries is how many of the newest entries it keeps at most,
	// as raft.LogCache of that size did.
	logCacheEntries = 1024
	// logCacheBytes bounds the bytes of their commands: a fleet's status
	// and session batches run to hundreds of KiB an entry, and 1,024 of
	// them held 42 MB of a server's heap at 10,000 idle sessions (make
	// bench-sessions), over 100 MB while a change reached a fleet.
	logCacheBytes = 8 << 20
)

// logCache keeps the newest Raft log entries in memory in front of the
// log store, as raft.LogCache does, so that the leader replicates them
// and every server applies them without reading them back from disk. It
// keeps at most maxEntries of them, and lets the oldest go once their
// commands and extensions come to more than maxBytes; the newest entry
// stays whatever its size. A read it cannot answer goes to the store.
type logCache struct {
	store    raft.LogStore
	maxBytes int
	mu       sync.RWMutex
	ring     []*raft.Log // guarded by mu; entry i at i % len(ring)
	bytes    int         // guarded by mu; the bytes of the entries in ring
	oldest   uint64      // guarded by mu; no entry below it is in ring (0: none yet)
	newest   uint64      // guarded by mu; the highest index stored
}

func newLogCache(store raft.LogStore, maxEntries, maxBytes int) (*logCache, error) {
	if maxEntries <= 0 || maxBytes <= 0 {
		return nil, fmt.Errorf("log cache: %d entries and %d bytes: both must be positive", maxEntries, maxBytes)
	}
	return &logCache{store: store, maxBytes: maxBytes, ring: make([]*raft.Log, maxEntries)}, nil
}

func logBytes(l *raft.Log) int { return len(l.Data) + len(l.Extensions) }

// IsMonotonic implements raft.MonotonicLogStore for the store beneath.
func (c *logCache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// GetLog implements raft.LogStore.
func (c *logCache) GetLog(idx uint64, log *raft.Log) error {
	c.mu.RLock()
	cached := c.ring[idx%uint64(len(c.ring))]
	c.mu.RUnlock()
	if cached != nil && cached.Index == idx {
		*log = *cached
		return nil
	}
	return c.store.GetLog(idx, log)
}

// StoreLog implements raft.LogStore.
func (c *logCache) StoreLog(log *raft.Log) error { return c.StoreLogs([]*raft.Log{log}) }

// StoreLogs implements raft.LogStore: the entries go to the store, and,
// once it has them, into the cache.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return fmt.Errorf("unable to store logs within log store, err: %q", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := uint64(len(c.ring))
	for _, l := range logs {
		slot := l.Index % n
		if old := c.ring[slot]; old != nil {
			c.bytes -= logBytes(old) // replaced: an older entry, or this index rewritten
		}
		c.ring[slot] = l
		c.bytes += logBytes(l)
		if c.oldest == 0 || l.Index < c.oldest {
			c.oldest = l.Index
		}
		if l.Index >= n {
			c.oldest = max(c.oldest, l.Index-n+1) // what the ring overwrote
		}
		c.newest = max(c.newest, l.Index)
	}
	for c.bytes > c.maxBytes && c.oldest < c.newest {
		slot := c.oldest % n
		if old := c.ring[slot]; old != nil && old.Index == c.oldest {
			c.bytes -= logBytes(old)
			c.ring[slot] = nil
		}
		c.oldest++
	}
	return nil
}

// FirstIndex implements raft.LogStore.
func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex implements raft.LogStore.
func (c *logCache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// DeleteRange implements raft.LogStore; it empties the cache.
func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	clear(c.ring)
	c.bytes, c.oldest, c.newest = 0, 0, 0
	c.mu.Unlock()
	return c.store.DeleteRange(lo, hi)
}
