package main

import (
	"os/exec"
	"syscall"
)

// setChildAttrs has the kernel stop the child if meteor dies without
// stopping it (kill -9, a crash), so no simulator outlives the demo.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// lowerPriority sets the nice value of process pid.
func lowerPriority(pid, nice int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, pid, nice)
}
