//go:build !unix

package agent

import "github.com/meteor-edge/meteor/agent/journal"

// Outside Unix there are no process groups to find: a step's processes
// are not tracked across a crash.
func survivors(*journal.StepProcess) []int { return nil }

func procStart(int) uint64 { return 0 }

func signalGroups([]int, bool) {}
