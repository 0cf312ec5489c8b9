package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/meteor-edge/meteor/fsm"
)

// localProposer is a proposer without Raft: it applies each command to an
// in-memory state machine at the next index, as a one-server cluster's
// leader would. fail, if set, decides which commands fail instead (as
// commits lost in an election do).
type localProposer struct {
	mu    sync.Mutex
	state *fsm.FSM
	index uint64                       // guarded by mu
	fail  func(t fsm.MessageType) bool // guarded by mu
	types []fsm.MessageType            // guarded by mu; committed commands, in order
}

var errInjected = errors.New("injected: no cluster leader")

func newLocalProposer(t testing.TB) *localProposer {
	t.Helper()
	f, err := fsm.New(fsm.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// The cluster runs this release's level, as a new one's leader makes
	// it at once (levelRaiser).
	raise, err := fsm.Encode(fsm.SetFeatureLevelType, &fsm.SetFeatureLevelRequest{Level: fsm.FeatureLevel})
	if err != nil {
		t.Fatal(err)
	}
	if res := f.Apply(1, raise); res.Err != nil {
		t.Fatal(res.Err)
	}
	return &localProposer{state: f, index: 1}
}

func (p *localProposer) apply(ctx context.Context, t fsm.MessageType, req any) (fsm.ApplyResult, uint64, error) {
	data, err := fsm.Encode(t, req)
	if err != nil {
		return fsm.ApplyResult{}, 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil && p.fail(t) {
		return fsm.ApplyResult{}, 0, errInjected
	}
	p.index++
	p.types = append(p.types, t)
	return p.state.Apply(p.index, data), p.index, nil
}

func (p *localProposer) setFail(f func(fsm.MessageType) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = f
}

// committed counts the commands of type t committed so far.
func (p *localProposer) committed(t fsm.MessageType) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, have := range p.types {
		if have == t {
			n++
		}
	}
	return n
}

// mustApply commits a command and fails the test if it is not committed
// or the state machine rejects it.
func (p *localProposer) mustApply(t testing.TB, mt fsm.MessageType, req any) {
	t.Helper()
	res, _, err := p.apply(context.Background(), mt, req)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatal(err)
	}
}

// fixedOwners is an ownerView of a fixed set of alive servers.
type fixedOwners []ownerCandidate

func (f fixedOwners) ownerCandidates() []ownerCandidate { return f }

// runComponent runs a component's Run in the background; stop cancels
// its context and waits for Run to return.
func runComponent(t testing.TB, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
}
