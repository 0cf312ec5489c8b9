package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/meteor-edge/meteor/fsm"
)

// raftFSM adapts fsm.FSM to raft.FSM and raft.BatchingFSM.
type raftFSM struct {
	state  *fsm.FSM
	logger hclog.Logger
}

var _ raft.BatchingFSM = (*raftFSM)(nil)

func (r *raftFSM) Apply(l *raft.Log) any { return r.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies the commands among logs in one state transaction.
// Other log types (configuration changes, no-ops) change no state.
func (r *raftFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	var idx []uint64
	var data [][]byte
	var pos []int
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		idx = append(idx, l.Index)
		data = append(data, l.Data)
		pos = append(pos, i)
	}
	if len(data) == 0 {
		return out
	}
	res := r.state.ApplyBatch(idx, data)
	for i, p := range pos {
		out[p] = res[i]
	}
	return out
}

func (r *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	return &raftSnapshot{snap: r.state.Snapshot(), logger: r.logger}, nil
}

func (r *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	before := r.state.Read().RestoreMark()
	if err := r.state.Restore(rc); err != nil {
		if errors.Is(err, fsm.ErrOlderSnapshot) {
			// Not an error for Raft: the state kept is that snapshot and
			// the committed entries after it (see fsm.Restore). Failing
			// would have the leader send the same snapshot again and again.
			r.logger.Info("kept the state, newer than the snapshot installed", "detail", err)
			return nil
		}
		return err
	}
	read := r.state.Read()
	if m := read.RestoreMark(); m != before {
		r.logger.Info("restored state from an operator's snapshot restore", "index", read.Index(), "revision", read.Revision(), "restore", m.String())
		return nil
	}
	r.logger.Info("restored state from snapshot", "index", read.Index(), "revision", read.Revision())
	return nil
}

type raftSnapshot struct {
	snap   *fsm.Snapshot
	logger hclog.Logger
}

func (s *raftSnapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	n, err := s.snap.WriteTo(sink)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close snapshot: %w", err)
	}
	s.logger.Debug("snapshot persisted", "snapshot", sink.ID(), "bytes", n, "took", time.Since(start))
	return nil
}

func (s *raftSnapshot) Release() {}

// Raft's timeouts at RaftMultiplier 1. Heartbeat and election are
// hashicorp/raft's defaults. The leader lease is raised from its 500 ms to
// the heartbeat timeout: a leader whose process was not scheduled for half
// a second (a busy host, which is what a leader losing its lease on a
// healthy network was found to be) stepped down although every follower
// still followed it. The lease only bounds how long a cut-off leader keeps
// its role; reads are confirmed with a quorum (VerifyLeader), not the
// lease, so a longer lease costs no consistency.
const (
	baseHeartbeatTimeout   = time.Second
	baseElectionTimeout    = time.Second
	baseLeaderLeaseTimeout = time.Second
)

// tcpLayer is a plain TCP raft.StreamLayer.
type tcpLayer struct {
	net.Listener
}

func (t tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

// noPipeline is the Raft transport without pipelined replication, which
// hashicorp/raft v1.7.3 can deadlock in: when a follower answers an
// AppendEntries with Success=false (or a newer term), pipelineDecode
// returns and nothing reads the pipeline's responses any more; the next
// pipelined send then blocks on the full in-flight channel, and the
// pipeline is closed only after that send returns. Replication to that
// follower stops for good while heartbeats still flow, and Raft's
// Shutdown waits on the stuck goroutine forever (seen in TestGrowAndShrink
// when a leader left under load). Without pipelining, each AppendEntries
// waits for its answer; a busy leader still sends up to MaxAppendEntries
// entries in each. It also hands heartbeats to Raft through heartbeats
// (heartbeatGate), so that the store closes after the last of them.
type noPipeline struct {
	*raft.NetworkTransport
	heartbeats *heartbeatGate
}

// SetHeartbeatHandler installs Raft's heartbeat handler behind the gate,
// so closing the store can wait for the heartbeats being handled.
func (t noPipeline) SetHeartbeatHandler(fn func(raft.RPC)) {
	t.NetworkTransport.SetHeartbeatHandler(t.heartbeats.wrap(fn))
}

// heartbeatGate keeps heartbeats away from a closed store. The transport
// hands a heartbeat to Raft on the goroutine that read it, not through
// Raft's main loop, and Raft's Shutdown waits only for its own
// goroutines. A heartbeat from a newer term that passed Raft's shutdown
// check just before Shutdown still writes the term to the store, and
// hashicorp/raft panics when that write fails ("failed to save current
// term: database not open"). close waits for the heartbeats in hand and
// answers later ones with ErrRaftShutdown, so the store closes after the
// last write.
type heartbeatGate struct {
	mu     sync.Mutex
	closed bool
	inHand sync.WaitGroup
}

func (g *heartbeatGate) wrap(fn func(raft.RPC)) func(raft.RPC) {
	if fn == nil {
		return nil
	}
	return func(rpc raft.RPC) {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			rpc.Respond(nil, raft.ErrRaftShutdown)
			return
		}
		g.inHand.Add(1)
		g.mu.Unlock()
		defer g.inHand.Done()
		fn(rpc)
	}
}

// close turns later heartbeats away and waits for those in hand.
func (g *heartbeatGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.inHand.Wait()
}

// AppendEntriesPipeline declines, so Raft replicates one request at a
// time.
func (noPipeline) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// raftParts are what setupRaft builds, so Shutdown can close them.
type raftParts struct {
	raft      *raft.Raft
	store     *raftboltdb.BoltStore
	transport *raft.NetworkTransport
	// heartbeats is closed after Raft's Shutdown and before the store.
	heartbeats heartbeatGate
	// tls is the mutual-TLS layer under the transport; nil without
	// Config.PeerTLS.
	tls      *tlsLayer
	hasState bool
}

// raftStoreOptions are the options a server's Raft log store (raft.db) is
// opened with, by the server and by RecoverRaft.
//
// Timeout: a running server holds the file's lock, so opening it again
// fails with bbolt.ErrTimeout after bboltLockTimeout instead of waiting
// for the lock without a word.
//
// NoFreelistSync: bbolt does not write its list of free pages at every
// commit; it rebuilds the list from the pages in use when it opens the
// file, after a crash too. Raft deletes the log behind each snapshot, so
// the list holds thousands of pages, and writing it was a commit's
// largest write after the entries themselves: BenchmarkRaftStoreLogs
// measures the bytes written and the CPU per entry stored with and
// without it. Consul and Nomad offer the same setting for their
// raft-boltdb stores; the cost is a scan of the file when it is opened,
// which a log of TrailingLogs entries keeps small.
func raftStoreOptions(path string) raftboltdb.Options {
	return raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{NoFreelistSync: true, Timeout: bboltLockTimeout}}
}

func (s *Server) setupRaft() (*raftParts, error) {
	dir := filepath.Join(s.config.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create raft dir: %w", err)
	}
	dbPath := filepath.Join(dir, "raft.db")
	store, err := raftboltdb.New(raftStoreOptions(dbPath))
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("open raft store %s: in use by another server on data dir %s (still held after %v)", dbPath, s.config.DataDir, bboltLockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("open raft store %s: %w", dbPath, err)
	}
	p := &raftParts{store: store}
	ok := false
	defer func() {
		if !ok {
			p.close()
		}
	}()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, s.logger.Named("raft"))
	if err != nil {
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	ln, err := net.Listen("tcp", s.config.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for raft on %s: %w", s.config.RaftAddr, err)
	}
	s.raftAddr = ln.Addr().String()
	var layer raft.StreamLayer = tcpLayer{ln}
	if s.config.RaftLayer != nil {
		layer = s.config.RaftLayer(s.config.NodeID, ln)
	}
	if s.config.PeerTLS != nil {
		p.tls = newTLSLayer(layer, s.config.PeerTLS)
		layer = p.tls
	}
	p.transport = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 3, Timeout: 10 * time.Second,
		Logger: s.logger.Named("raft-net"),
	})

	rc := raft.DefaultConfig()
	m := time.Duration(max(1, s.config.RaftMultiplier))
	rc.HeartbeatTimeout = baseHeartbeatTimeout * m
	rc.ElectionTimeout = baseElectionTimeout * m
	rc.LeaderLeaseTimeout = baseLeaderLeaseTimeout * m
	rc.LocalID = raft.ServerID(s.config.NodeID)
	rc.Logger = s.logger.Named("raft")
	rc.SnapshotThreshold = s.config.SnapshotThreshold
	rc.SnapshotInterval = s.config.SnapshotInterval
	rc.TrailingLogs = s.config.TrailingLogs
	// Buffer the apply channel so concurrent writers queue up and the
	// leader writes them to disk together: many writes, one fsync.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 512
	rc.NotifyCh = s.leaderCh
	if s.config.RaftTuning != nil {
		s.config.RaftTuning(rc)
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("raft config: %w", err)
	}
	p.hasState, err = raft.HasExistingState(store, store, snaps)
	if err != nil {
		return nil, fmt.Errorf("read raft state: %w", err)
	}
	if s.config.Dev && !p.hasState {
		conf := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: p.transport.LocalAddr(), Suffrage: raft.Voter}}}
		if err := raft.BootstrapCluster(rc, store, store, snaps, p.transport, conf); err != nil {
			return nil, fmt.Errorf("bootstrap dev server: %w", err)
		}
	}
	// Keep the newest entries in memory: the leader reads them back to
	// replicate, and every server to apply them, and would otherwise go
	// to disk for each (logcache.go).
	logs, err := newLogCache(store, logCacheEntries, logCacheBytes)
	if err != nil {
		return nil, fmt.Errorf("raft log cache: %w", err)
	}
	p.raft, err = raft.NewRaft(rc, &raftFSM{state: s.fsm, logger: s.logger.Named("fsm")}, logs, store, snaps, noPipeline{p.transport, &p.heartbeats})
	if err != nil {
		return nil, fmt.Errorf("start raft: %w", err)
	}
	if p.tls != nil {
		p.tls.watch(p.raft)
	}
	ok = true
	return p, nil
}

func (p *raftParts) close() error {
	var errs []error
	if p.raft != nil {
		// Only the first Shutdown's future waits for Raft's goroutines;
		// whatever else shuts Raft down must wait on its own future, or
		// the store below closes under a goroutine still writing to it.
		if err := p.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("shut down raft: %w", err))
		}
	}
	p.heartbeats.close()
	if p.transport != nil {
		// Close closes only the listener: the pooled connections to other
		// servers would stay open, and with them the goroutines on both
		// ends that read them.
		p.transport.CloseStreams()
		if err := p.transport.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raft transport: %w", err))
		}
	}
	if p.store != nil {
		if err := p.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raft store: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkNodeID records the node ID in the data dir on first start and
// refuses a data dir that belongs to another node.
func checkNodeID(dataDir, id string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dataDir, "node-id")
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return writeFileSync(path, []byte(id+"\n"))
	case err != nil:
		return fmt.Errorf("read %s: %w", path, err)
	}
	if have := strings.TrimSpace(string(b)); have != id {
		return fmt.Errorf("data dir %s belongs to node %q, not %q: start with --node-id %s or use another data dir", dataDir, have, id, have)
	}
	return nil
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
