package cluster

import (
	"net"
	"sync"
	"testing"

	"github.com/meteor-edge/meteor/wire"
)

// idRecorder counts, by length, the source connection IDs of the
// long-header packets a server writes on its agent socket: the IDs it
// chose for its connections.
type idRecorder struct {
	net.PacketConn
	mu   sync.Mutex
	lens map[int]int
}

func (r *idRecorder) WriteTo(p []byte, addr net.Addr) (int, error) {
	if len(p) > 6 && p[0]&0x80 != 0 && len(p) > 6+int(p[5]) {
		r.mu.Lock()
		r.lens[int(p[6+int(p[5])])]++
		r.mu.Unlock()
	}
	return r.PacketConn.WriteTo(p, addr)
}

// TestAgentSocketConnectionIDs: a server's agent socket carries every
// session on it, so it chooses connection IDs long enough never to give
// one session's ID to another (wire.SharedConnectionIDLength). With
// quic-go's 4-byte default, a fleet of thousands connecting to one server
// could silence a session that way: its agent's packets would go to the
// newer connection, which cannot decrypt them.
func TestAgentSocketConnectionIDs(t *testing.T) {
	pki := newTestPKI(t)
	rec := &idRecorder{lens: map[int]int{}}
	c := newTestCluster(t, 1, func(cfg *Config) {
		pki.withAgents(t)(cfg)
		cfg.AgentPacketConn = func(pc net.PacketConn) net.PacketConn { rec.PacketConn = pc; return rec }
	})
	s := c.waitLeader()
	for _, id := range []string{"dev-1", "dev-2"} {
		a := dialAgent(t, s.AgentAddr(), pki.deviceTLS(t, id))
		a.send(hello(map[string]string{"region": "eu"}))
		expect[*wire.Welcome](a)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.lens) != 1 || rec.lens[wire.SharedConnectionIDLength] == 0 {
		t.Fatalf("the server chose connection IDs of these lengths (bytes: packets): %v; want %d bytes only", rec.lens, wire.SharedConnectionIDLength)
	}
}
