package main

import (
	"fmt"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// The device's desired state: one intent selecting it by a label it
// reports, with a few small file resources; the timed changes rewrite one
// of them.
const (
	intentName = "footprint"
	deviceID   = "footprint-1"
	labelFleet = "fleet"
	fleetValue = "footprint"
	// pushedID is the resource each timed change rewrites.
	pushedID = "motd"
)

// resourceIDs are the intent's resources, pushedID first.
var resourceIDs = []string{pushedID, "agent-conf", "ntp-conf"}

// deviceLabels are the labels the agent reports.
func deviceLabels() map[string]string { return map[string]string{labelFleet: fleetValue} }

// intentDoc is the intent at version (1 is the first; each timed change
// is the next).
func intentDoc(version int) ([]byte, error) {
	contents := map[string]string{
		pushedID:     fmt.Sprintf("Welcome to store 42. Desired state version %d.\n", version),
		"agent-conf": "[agent]\nreport_interval = 60s\nlog_level = info\n",
		"ntp-conf":   "server 0.pool.ntp.org iburst\nserver 1.pool.ntp.org iburst\n",
	}
	paths := map[string]string{pushedID: "/etc/motd", "agent-conf": "/etc/meteor/agent.conf", "ntp-conf": "/etc/ntp.conf"}
	in := &intent.Intent{Name: intentName, Selector: deviceLabels()}
	for _, id := range resourceIDs {
		in.Resources = append(in.Resources, intent.Resource{ID: id, Type: intent.TypeFile, Spec: map[string]any{
			"path": paths[id], "mode": "0644", "content": contents[id],
		}})
	}
	return in.Canonical()
}
