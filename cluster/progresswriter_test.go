package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/wire"
)

// streamPair returns the server's side of a control stream over real
// QUIC on loopback and the agent's, whose stream takes at most window
// bytes ahead of what it has read (flow control).
func streamPair(t *testing.T, window uint64) (server, agent *quic.Stream) {
	t.Helper()
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	pki := newTestPKI(t)
	cert, err := pki.ca.IssueServer("s1", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", wire.ServerTLSConfig(pki.ca.Pool(), cert, nil), wire.ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc := wire.ClientQUICConfig()
	qc.InitialStreamReceiveWindow, qc.MaxStreamReceiveWindow = window, window
	conn, err := quic.DialAddr(ctx, ln.Addr().String(), pki.deviceTLS(t, "dev-1"), qc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(wire.CloseNormal, "") })
	agent, err = conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Write([]byte{0}); err != nil { // lets the server accept it
		t.Fatal(err)
	}
	sconn, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sconn.CloseWithError(wire.CloseNormal, "") })
	if server, err = sconn.AcceptStream(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return server, agent
}

// TestProgressWriterGoesOnWhileTheAgentReads: a write larger than the
// agent takes within the idle bound goes through as long as the agent
// keeps reading (a Delta of megabytes over a slow link): the bound is on
// a write that makes no progress, not on the whole write.
func TestProgressWriterGoesOnWhileTheAgentReads(t *testing.T) {
	server, agent := streamPair(t, 16<<10)
	const idle = time.Second
	w := progressWriter{stream: server, idle: idle, leaveBy: new(atomic.Int64)}
	msg := bytes.Repeat([]byte("delta"), 300<<10) // 1.5 MiB
	got := make(chan []byte, 1)
	go func() {
		// The agent's link: 16 KiB every 25 ms, so the write takes
		// about 2.4 s, more than twice the idle bound, and the stream
		// takes some of it every 25 ms.
		var b bytes.Buffer
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for b.Len() < len(msg) {
			<-tick.C
			if _, err := io.CopyN(&b, agent, int64(min(16<<10, len(msg)-b.Len()))); err != nil {
				break
			}
		}
		got <- b.Bytes()
	}()
	start := time.Now()
	if n, err := w.Write(msg); err != nil || n != len(msg) {
		t.Fatalf("write of %d bytes: %d written, %v", len(msg), n, err)
	}
	if b := <-got; !bytes.Equal(b, msg) {
		t.Fatalf("the agent read %d bytes, not the %d written", len(b), len(msg))
	}
	t.Logf("a %d-byte write took %v with an idle bound of %v", len(msg), time.Since(start), idle)
}

// TestProgressWriterGivesUpOnAStalledAgent: an agent that stops reading
// fills its flow-control window, and the write fails once the stream has
// taken nothing for the idle bound; a session leaving a draining server
// stops writing at its leaveBy.
func TestProgressWriterGivesUpOnAStalledAgent(t *testing.T) {
	server, _ := streamPair(t, 16<<10)
	w := progressWriter{stream: server, idle: 300 * time.Millisecond, leaveBy: new(atomic.Int64)}
	msg := make([]byte, 256<<10)
	n, err := w.Write(msg)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(msg) {
		t.Fatalf("write to an agent that reads nothing: %d of %d written, %v; want a deadline error", n, len(msg), err)
	}
	w.leaveBy.Store(time.Now().Add(-time.Second).UnixNano())
	if n, err := w.Write([]byte("GoAway")); !errors.Is(err, os.ErrDeadlineExceeded) || n != 0 {
		t.Fatalf("write past leaveBy: %d written, %v; want a deadline error at once", n, err)
	}
}
