package intent

import (
	"strings"
	"testing"
	"time"
)

func TestBuiltinClassesValid(t *testing.T) {
	for name, c := range BuiltinClasses() {
		if c.Name != name {
			t.Errorf("class under %q is named %q", name, c.Name)
		}
		if err := c.ValidateWritten(); err != nil {
			t.Error(err)
		}
	}
	for _, name := range []string{DefaultClass, "network-policy", "logging", "certificate", "package"} {
		if _, ok := BuiltinClasses()[name]; !ok {
			t.Errorf("no built-in class %q", name)
		}
	}
}

// TestParseClasses: a field left out takes the base class's value (the
// default class's for a new name), every field and the jitter parse, and
// what is wrong is named.
func TestParseClasses(t *testing.T) {
	base := BuiltinClasses()
	cs, err := ParseClasses([]byte(`
name: network-policy
probeInterval: 5s
---
kind: class
name: pos-critical
description: the tills
pullInterval: 30s
reportInterval: 2h
retry: {base: 2s, max: 20s, jitter: 0.5}
unreachableAfter: 90s
progressDeadline: 3m
`), base)
	if err != nil {
		t.Fatal(err)
	}
	np := base["network-policy"]
	np.ProbeInterval = 5 * time.Second
	want := []Class{np, {
		Name: "pos-critical", Description: "the tills", PullInterval: 30 * time.Second, ProbeInterval: base[DefaultClass].ProbeInterval,
		ReportInterval: 2 * time.Hour, RetryBase: 2 * time.Second, RetryMax: 20 * time.Second, RetryJitter: 0.5,
		UnreachableAfter: 90 * time.Second, ProgressDeadline: 3 * time.Minute,
	}}
	if len(cs) != 2 || cs[0] != want[0] || cs[1] != want[1] {
		t.Errorf("ParseClasses =\n%+v\nwant\n%+v", cs, want)
	}
	for doc, msg := range map[string]string{
		"name: a\nprobeInterval: 5\n":            "probeInterval: \"5\" is not a duration",
		"name: a\nprobeInterval: 500ms\n":        "probeInterval must be at least 1s",
		"name: a\nprobe: 5s\n":                   "field probe not found",
		"probeInterval: 5s\n":                    "name is required",
		"kind: intent\nname: a\n":                `kind "intent", want class`,
		"name: a\n---\nname: a\n":                `class "a" given twice`,
		"name: A\n":                              "name must be a DNS label",
		"name: a\nretry: {base: 1m, max: 10s}\n": "retry.base 1m0s above retry.max 10s",
		"name: a\nretry: {jitter: 2}\n":          "retry.jitter must be in [0, 1]",
		"":                                       "no class in the document",
		"name: a\nreportInterval: 200h\n":        "reportInterval must be at most 168h0m0s",
		"name: a\nunreachableAfter: 1s\nx: [\n":  "class document",
		"name: a\ndescription: " + strings.Repeat("d", 1025) + "\n": "description must be at most 1024 bytes",
	} {
		if _, err := ParseClasses([]byte(doc), base); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseClasses(%q) = %v, want an error with %q", doc, err, msg)
		}
	}
}

func TestClassRetryDelay(t *testing.T) {
	c := Class{RetryBase: time.Second, RetryMax: 5 * time.Second}
	var got []time.Duration
	for n := 1; n <= 5; n++ {
		got = append(got, c.RetryDelay(n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("RetryDelay = %v, want %v", got, want)
		}
	}
}
