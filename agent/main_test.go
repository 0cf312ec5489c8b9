package agent

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: Run must
// return only after everything it started has exited.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
