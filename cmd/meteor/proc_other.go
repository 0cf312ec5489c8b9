//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

func setChildAttrs(cmd *exec.Cmd) {}

func lowerPriority(pid, nice int) error {
	return errors.New("not supported on this system")
}
