package journal

import (
	"testing"
	"time"
)

func TestNATBindingSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := j.NATBinding(); ok || err != nil {
		t.Fatalf("fresh journal: ok %v, %v", ok, err)
	}
	at := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	want := NATBinding{Verified: 108 * time.Second, VerifiedAt: at, Failed: 120 * time.Second, FailedAt: at, Tests: 4}
	if err := j.SaveNATBinding(want); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if j, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	got, ok, err := j.NATBinding()
	if !ok || err != nil || !got.VerifiedAt.Equal(want.VerifiedAt) || got.Verified != want.Verified || got.Failed != want.Failed || got.Tests != want.Tests {
		t.Fatalf("after reopening: %+v, %v, %v; want %+v", got, ok, err, want)
	}
}
