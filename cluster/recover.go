package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/meteor-edge/meteor/fsm"
)

// RecoverPeer is a server of the configuration RecoverRaft writes.
type RecoverPeer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}

// RecoverOptions say which stopped server's data dir to recover and into
// what configuration.
type RecoverOptions struct {
	// DataDir is the data dir of a stopped server.
	DataDir string
	// NodeID is the server's node ID; "" takes the data dir's.
	NodeID string
	// Peers are the servers of the new configuration: this one and every
	// other survivor, each recovered with the same list. Empty: this
	// server alone, at RaftAddr, or else at the Raft address its last
	// configuration has for it.
	Peers    []RecoverPeer
	RaftAddr string
	// FSM configures the state machine that replays the log: the
	// cluster's history limit, timeline and audit limits.
	FSM fsm.Config
	// Logger receives Raft's logs; nil discards them.
	Logger hclog.Logger
}

// RecoverResult says what RecoverRaft found and wrote.
type RecoverResult struct {
	NodeID string `json:"node_id"`
	// Old is the configuration the data dir had, New the one it has now.
	Old []RecoverPeer `json:"old_configuration"`
	New []RecoverPeer `json:"new_configuration"`
	// LastIndex and LastTerm are those of the log recovered; Index and
	// Revision the state's once every entry in it was applied.
	LastIndex uint64 `json:"last_index"`
	LastTerm  uint64 `json:"last_term"`
	Index     uint64 `json:"index"`
	Revision  uint64 `json:"revision"`
}

// bboltLockTimeout bounds the wait for the Raft store's lock: a server
// running on the data dir holds it.
const bboltLockTimeout = time.Second

// RecoverRaft recovers a cluster that lost its majority for good, on the
// data dir of a stopped survivor (Consul's peers.json, done as a command):
// it replays the survivor's whole Raft log into a state machine, writes it
// as a snapshot that carries the new configuration (opts.Peers, or this
// server alone), and empties the log (raft.RecoverCluster). Started again,
// the server elects itself (or the survivors elect one of them) with
// every entry it had, committed or not, and takes writes; new servers
// then join it with empty data dirs. The lost servers must never come back
// with their old data dirs: wipe them first.
//
// It refuses a data dir without Raft state, one in use by a running
// server, and a configuration that does not include this server.
func RecoverRaft(opts RecoverOptions) (*RecoverResult, error) {
	id, err := recoverNodeID(opts.DataDir, opts.NodeID)
	if err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	dir := filepath.Join(opts.DataDir, "raft")
	dbPath := filepath.Join(dir, "raft.db")
	if _, err := os.Stat(dbPath); err != nil {
		return nil, fmt.Errorf("recover: %s: %w: is %s a server's data dir?", dbPath, err, opts.DataDir)
	}
	store, err := raftboltdb.New(raftStoreOptions(dbPath))
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("recover: %s is in use: stop the server first", dbPath)
	}
	if err != nil {
		return nil, fmt.Errorf("recover: open %s: %w", dbPath, err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, logger)
	if err != nil {
		return nil, fmt.Errorf("recover: open snapshot store: %w", err)
	}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(id)
	conf.Logger = logger
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()

	res := &RecoverResult{NodeID: id}
	scratch, err := fsm.New(opts.FSM)
	if err != nil {
		return nil, err
	}
	old, err := raft.GetConfiguration(conf, &raftFSM{state: scratch, logger: logger}, store, store, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("recover: read the configuration: %w", err)
	}
	for _, srv := range old.Servers {
		res.Old = append(res.Old, RecoverPeer{ID: string(srv.ID), Address: string(srv.Address)})
	}
	res.New = opts.Peers
	if len(res.New) == 0 {
		addr := opts.RaftAddr
		for _, p := range res.Old {
			if p.ID == id && addr == "" {
				addr = p.Address
			}
		}
		if addr == "" {
			return nil, fmt.Errorf("recover: %s is not in the configuration this data dir holds (%v): give its Raft address", id, res.Old)
		}
		res.New = []RecoverPeer{{ID: id, Address: addr}}
	}
	var next raft.Configuration
	for _, p := range res.New {
		if err := CheckNodeID(p.ID); err != nil {
			return nil, fmt.Errorf("recover: %w", err)
		}
		if err := checkAddr(p.Address); err != nil {
			return nil, fmt.Errorf("recover: %s's address: %w", p.ID, err)
		}
		next.Servers = append(next.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address), Suffrage: raft.Voter})
	}
	if !slices.ContainsFunc(res.New, func(p RecoverPeer) bool { return p.ID == id }) {
		return nil, fmt.Errorf("recover: the new configuration (%v) leaves out this server, %s", res.New, id)
	}
	if res.LastIndex, err = store.LastIndex(); err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	if res.LastIndex > 0 {
		var last raft.Log
		if err := store.GetLog(res.LastIndex, &last); err == nil {
			res.LastTerm = last.Term
		}
	}
	state, err := fsm.New(opts.FSM)
	if err != nil {
		return nil, err
	}
	if err := raft.RecoverCluster(conf, &raftFSM{state: state, logger: logger}, store, store, snaps, trans, next); err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	res.Index, res.Revision = state.Read().Index(), state.Read().Revision()
	return res, nil
}

// recoverNodeID returns the node ID the data dir records, checked against
// want if set.
func recoverNodeID(dataDir, want string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "node-id"))
	if err != nil {
		return "", fmt.Errorf("recover: %w: is %s a server's data dir?", err, dataDir)
	}
	have := strings.TrimSpace(string(b))
	if want != "" && want != have {
		return "", fmt.Errorf("recover: data dir %s belongs to node %q, not %q", dataDir, have, want)
	}
	return have, nil
}
