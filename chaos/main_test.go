package chaos

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/meteor-edge/meteor/chaos/chaostest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// memberlist's Shutdown returns while a probe it started still
		// waits for its ack, or for its timer of ProbeInterval, and for
		// the TCP fallback ping bounded by the probe's deadline: they end
		// on their own, but on a loaded host after goleak's last retry
		// (seen under make test beside two busy loops).
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).sendPingAndWaitForAck"),
	)
}

func testLogger(t testing.TB, name string, level hclog.Level) hclog.Logger {
	return chaostest.Logger(t, name, level)
}

// waitFor polls cond every few milliseconds until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
