package cluster

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestHeartbeatGateWaitsForHeartbeatsInHand: closing the gate waits for
// a heartbeat Raft is handling, and turns later ones away without
// handing them to Raft, so the store can close after the last write.
func TestHeartbeatGateWaitsForHeartbeatsInHand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g heartbeatGate
		release := make(chan struct{})
		var handled atomic.Int32
		handle := g.wrap(func(rpc raft.RPC) {
			handled.Add(1)
			<-release
			rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
		})

		first := make(chan raft.RPCResponse, 1)
		go handle(raft.RPC{RespChan: first})
		synctest.Wait()

		closed := make(chan struct{})
		go func() {
			g.close()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("the gate closed while a heartbeat was in hand")
		default:
		}

		later := make(chan raft.RPCResponse, 1)
		handle(raft.RPC{RespChan: later})
		if resp := <-later; !errors.Is(resp.Error, raft.ErrRaftShutdown) {
			t.Errorf("a heartbeat after close was answered with %v, want %v", resp.Error, raft.ErrRaftShutdown)
		}
		if n := handled.Load(); n != 1 {
			t.Errorf("Raft handled %d heartbeats, want only the one before close", n)
		}

		close(release)
		synctest.Wait()
		select {
		case <-closed:
		default:
			t.Fatal("the gate did not close after the heartbeat in hand was answered")
		}
		if resp := <-first; resp.Error != nil {
			t.Errorf("the heartbeat in hand was answered with %v", resp.Error)
		}
	})
}

// TestTransportHeartbeatsPassTheGate sends heartbeats over a real
// transport to the one Raft is given: Raft's handler gets them until the
// gate closes, and the sender gets Raft's shutdown error after.
func TestTransportHeartbeatsPassTheGate(t *testing.T) {
	listen := func() *raft.NetworkTransport {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: tcpLayer{ln}, MaxPool: 1, Timeout: 10 * time.Second, Logger: hclog.NewNullLogger(),
		})
		t.Cleanup(func() {
			tr.CloseStreams()
			tr.Close()
		})
		return tr
	}
	receiver, sender := listen(), listen()
	var gate heartbeatGate
	var handled atomic.Int32
	noPipeline{receiver, &gate}.SetHeartbeatHandler(func(rpc raft.RPC) {
		handled.Add(1)
		rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
	})
	heartbeat := func() error {
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: []byte(sender.LocalAddr())},
			Term:      7,
		}
		var resp raft.AppendEntriesResponse
		return sender.AppendEntries("follower", receiver.LocalAddr(), req, &resp)
	}

	if err := heartbeat(); err != nil {
		t.Fatalf("heartbeat before close: %v", err)
	}
	if n := handled.Load(); n != 1 {
		t.Fatalf("Raft handled %d heartbeats, want 1", n)
	}
	gate.close()
	err := heartbeat()
	if err == nil || !strings.Contains(err.Error(), raft.ErrRaftShutdown.Error()) {
		t.Errorf("heartbeat after close: %v, want %q", err, raft.ErrRaftShutdown)
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("Raft handled %d heartbeats, want only the one before close", n)
	}
}

// TestShutdownClosesTheHeartbeatGate: a server's Shutdown closes the gate
// before its Raft store.
func TestShutdownClosesTheHeartbeatGate(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	s := c.waitLeader()
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	g := &s.rparts.heartbeats
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		t.Error("the heartbeat gate is open after Shutdown")
	}
}
