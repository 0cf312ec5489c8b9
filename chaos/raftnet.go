package chaos

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// raftStreamLayer is a raft.StreamLayer whose connections obey a Network.
type raftStreamLayer struct {
	n   *Network
	id  string
	ln  net.Listener
	acc *acceptor

	loopDone  chan struct{} // closed when acceptLoop returns
	acceptErr error         // set before loopDone closes
	closeOnce sync.Once
}

var _ raft.StreamLayer = (*raftStreamLayer)(nil)

// StreamLayer wraps a TCP listener for raft.NewNetworkTransport as node
// nodeID and registers its address under that ID. Dialing writes a preamble
// naming nodeID, which the accepting layer reads (on a goroutine per
// connection) before Accept returns the connection; both ends then check the
// partition table on every Read and Write. A dial across a cut link fails at
// once without touching the network.
//
// Closing the layer (NetworkTransport.Close does) closes the listener;
// connections already established are closed by their users or by
// Network.Close.
func (n *Network) StreamLayer(nodeID string, ln net.Listener) raft.StreamLayer {
	addr := ln.Addr().String()
	n.mu.Lock()
	n.addrNode[addr] = nodeID
	n.raftAddr[nodeID] = addr
	n.mu.Unlock()
	s := &raftStreamLayer{
		n:        n,
		id:       nodeID,
		ln:       ln,
		acc:      newAcceptor(n, "raft", nodeID),
		loopDone: make(chan struct{}),
	}
	go s.acceptLoop()
	return s
}

// RaftAddr returns the Raft address registered for nodeID.
func (n *Network) RaftAddr(nodeID string) (raft.ServerAddress, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.raftAddr[nodeID]
	return raft.ServerAddress(a), ok
}

// ServerAddr implements raft.ServerAddressProvider, so a NetworkTransport
// configured with the Network resolves server IDs through it.
func (n *Network) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if a, ok := n.RaftAddr(string(id)); ok {
		return a, nil
	}
	return "", fmt.Errorf("chaos: no raft address registered for node %q", id)
}

var _ raft.ServerAddressProvider = (*Network)(nil)

func (s *raftStreamLayer) acceptLoop() {
	defer close(s.loopDone)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.acceptErr = fmt.Errorf("chaos: raft accept on %s: %w", s.id, err)
			return
		}
		s.acc.handle(c)
	}
}

// Accept returns the next connection whose preamble was read.
func (s *raftStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.acc.out:
		return c, nil
	case <-s.loopDone:
		return nil, s.acceptErr
	case <-s.acc.done:
		return nil, fmt.Errorf("chaos: raft accept on %s: %w", s.id, net.ErrClosed)
	}
}

// Close closes the listener and fails pending handshakes.
func (s *raftStreamLayer) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.ln.Close()
		<-s.loopDone
		s.acc.close()
	})
	if err != nil && !isClosedErr(err) {
		return fmt.Errorf("chaos: close raft stream layer %s: %w", s.id, err)
	}
	return nil
}

// Addr returns the listener's address.
func (s *raftStreamLayer) Addr() net.Addr { return s.ln.Addr() }

// Dial connects to the node at address unless the partition table forbids.
func (s *raftStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.n.dial("raft", s.id, "", string(address), func() (net.Conn, error) {
		return net.DialTimeout("tcp", string(address), timeout)
	})
}
