//go:build !linux

package scenario

import "syscall"

// childProcAttr returns nil: only Linux stops a child when its parent
// dies; stop the fleet explicitly.
func childProcAttr() *syscall.SysProcAttr { return nil }

// lowerPriority is a no-op where Setpriority is not available.
func lowerPriority(int) error { return nil }
