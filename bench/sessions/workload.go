package main

import (
	"fmt"
	"strings"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// The intent every device of a run matches, and the label it selects on.
const (
	intentName = "fleet-config"
	labelKey   = "fleet"
	labelValue = "bench"
)

// deviceLabels are the labels every simulated device sends.
func deviceLabels() map[string]string { return map[string]string{labelKey: labelValue} }

// fleetLabels is the one map of deviceLabels every device shares.
var fleetLabels = deviceLabels()

func resourceID(i int) string { return fmt.Sprintf("r%02d", i) }

func resourceKey(i int) string { return intent.ResourceKey(intentName, resourceID(i)) }

// fileContent is a small configuration file for resource id at version,
// padded with comment text to pad extra bytes. Versions are written with a
// fixed width, so every version of a resource has the same size.
func fileContent(id string, version, pad int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s/%s, managed by Meteor, version %06d\n", intentName, id, version)
	fmt.Fprintf(&b, "[service]\nname = %s\nlisten = 0.0.0.0:%d\nworkers = 4\nlog_level = info\n", id, 8000+len(id))
	b.WriteString("# ")
	const filler = "the quick brown fox jumps over the lazy dog "
	for i := range pad {
		b.WriteByte(filler[i%len(filler)])
	}
	return b.String()
}

func fileResource(i, version, pad int) intent.Resource {
	id := resourceID(i)
	return intent.Resource{ID: id, Type: intent.TypeFile, Spec: map[string]any{
		"path":    "/etc/meteor-bench/" + id + ".conf",
		"mode":    "0644",
		"content": fileContent(id, version, pad),
	}}
}

// resourceBody encodes a resource as the server sends it to agents: the
// canonical encoding of its intent.ResourceBody.
func resourceBody(r intent.Resource) ([]byte, error) {
	b := intent.ResourceBody{Intent: intentName, Resource: r}
	return b.Canonical()
}

// padFor returns the padding that makes resource i's body bodySize bytes.
// Padding characters need no JSON escaping, so each adds one byte.
func padFor(i, bodySize int) (int, error) {
	b, err := resourceBody(fileResource(i, 0, 0))
	if err != nil {
		return 0, err
	}
	if pad := bodySize - len(b); pad >= 0 {
		return pad, nil
	}
	return 0, fmt.Errorf("-body-size %d: the smallest resource body is %d bytes", bodySize, len(b))
}

// fleetIntent is the intent of n file resources, resource i at version
// versions[i], each body bodySize bytes.
type fleetIntent struct {
	bodySize int
	versions []int
	pads     []int
}

func newFleetIntent(n, bodySize int) (*fleetIntent, error) {
	f := &fleetIntent{bodySize: bodySize, versions: make([]int, n), pads: make([]int, n)}
	for i := range n {
		p, err := padFor(i, bodySize)
		if err != nil {
			return nil, err
		}
		f.pads[i] = p
	}
	return f, nil
}

// intent returns the intent at the current versions.
func (f *fleetIntent) intent() *intent.Intent {
	in := &intent.Intent{Name: intentName, Selector: deviceLabels()}
	for i, v := range f.versions {
		in.Resources = append(in.Resources, fileResource(i, v, f.pads[i]))
	}
	return in
}

// document returns the intent's canonical JSON, as PUT to the HTTP API.
func (f *fleetIntent) document() ([]byte, error) { return f.intent().Canonical() }

// changedAt returns the resources revision k (1-based) changes: with churn
// "same" the first `changed` resources every time, with "rotate" one of
// them in turn.
func changedAt(k, changed int, churn string) []int {
	if churn == "rotate" {
		return []int{(k - 1) % changed}
	}
	out := make([]int, changed)
	for i := range out {
		out[i] = i
	}
	return out
}

// revise applies revision k: each changed resource gets version k.
func (f *fleetIntent) revise(k, changed int, churn string) []int {
	idx := changedAt(k, changed, churn)
	for _, i := range idx {
		f.versions[i] = k
	}
	return idx
}
