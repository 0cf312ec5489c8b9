package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// The desired state of every device: one intent selecting the whole fleet,
// with one file resource whose content carries the version.
const (
	intentName = "fanout"
	resourceID = "config"
	labelFleet = "fleet"
	fleetValue = "bench"
	labelGroup = "group"
)

// minBodySize is the smallest -body-size: the body with no padding.
var minBodySize = func() int {
	b, err := resourceBody(0, 0)
	if err != nil {
		panic(err)
	}
	return len(b)
}()

func groupName(g, groups int) string {
	return fmt.Sprintf("g%0*d", len(strconv.Itoa(groups-1)), g)
}

// deviceLabels are device i's labels: the fleet and its group.
func deviceLabels(i, groups int) map[string]string {
	return map[string]string{labelFleet: fleetValue, labelGroup: groupName(i%groups, groups)}
}

// versionMarker precedes the version in every document.
const versionMarker = "version "

// resource is the file resource at version, padded with pad bytes.
func resource(version, pad int) intent.Resource {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s/%s, managed by Meteor, %s%06d\n", intentName, resourceID, versionMarker, version)
	b.WriteString("[agent]\nreport_interval = 30s\nlog_level = info\n# ")
	const filler = "the quick brown fox jumps over the lazy dog "
	for i := range pad {
		b.WriteByte(filler[i%len(filler)])
	}
	return intent.Resource{ID: resourceID, Type: intent.TypeFile, Spec: map[string]any{
		"path": "/etc/meteor-bench/agent.conf", "mode": "0644", "content": b.String(),
	}}
}

// resourceBody encodes the resource as the server sends it to agents: the
// canonical encoding of its intent.ResourceBody. The MQTT devices receive
// the same bytes.
func resourceBody(version, pad int) ([]byte, error) {
	b := intent.ResourceBody{Intent: intentName, Resource: resource(version, pad)}
	return b.Canonical()
}

// desired makes the documents of each version, every body bodySize bytes
// (versions have a fixed width, so the padding is the same for all).
type desired struct{ pad int }

func newDesired(bodySize int) (*desired, error) {
	b, err := resourceBody(0, 0)
	if err != nil {
		return nil, err
	}
	if bodySize < len(b) {
		return nil, fmt.Errorf("body size %d: the smallest body is %d bytes", bodySize, len(b))
	}
	return &desired{pad: bodySize - len(b)}, nil
}

// intentDoc is the intent at version, as PUT to the HTTP API.
func (d *desired) intentDoc(version int) ([]byte, error) {
	in := &intent.Intent{Name: intentName, Selector: map[string]string{labelFleet: fleetValue},
		Resources: []intent.Resource{resource(version, d.pad)}}
	return in.Canonical()
}

// body is the desired-state document at version.
func (d *desired) body(version int) ([]byte, error) { return resourceBody(version, d.pad) }

// versionOf reads the version a document carries.
func versionOf(body []byte) (int, bool) {
	i := bytes.Index(body, []byte(versionMarker))
	if i < 0 || len(body) < i+len(versionMarker)+6 {
		return 0, false
	}
	v, err := strconv.Atoi(string(body[i+len(versionMarker) : i+len(versionMarker)+6]))
	return v, err == nil
}
