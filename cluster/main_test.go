package cluster

import (
	"os"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/chaos/chaostest"
)

// TestMain fails the package if a goroutine outlives the tests: every
// server goroutine is owned and waited for by Shutdown.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		code = chaostest.VerifyNoLeaks(10 * time.Second)
	}
	os.Exit(code)
}
