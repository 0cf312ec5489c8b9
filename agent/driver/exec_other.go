//go:build !unix

package driver

import "os/exec"

// killProcessGroupOnCancel keeps exec's default on systems without process
// groups: cancellation kills the direct child only.
func killProcessGroupOnCancel(cmd *exec.Cmd) {}
