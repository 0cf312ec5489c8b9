package scenario

import "syscall"

// childProcAttr makes a child process die with this one.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// lowerPriority sets this process's scheduling priority (nice value).
func lowerPriority(nice int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, 0, nice)
}
