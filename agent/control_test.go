package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// TestControlSocketOverride drives a running agent's control socket: the
// socket is its user's alone (mode 0600); an override needs a desired
// resource, a reason and a duration within bounds; one set is reported to
// the server with its reason, expiry and who set it, and listed; clearing
// it ends it.
func TestControlSocketOverride(t *testing.T) {
	c := newTestCluster(t)
	s1 := c.startServer("s1")
	c.setDesired(1, upsert(t, "pos", 1, simRes("motd", "v1", nil)))
	cfg := c.agentConfig(t, "dev-1", s1)
	a := startAgent(t, cfg)
	c.wait(t, 10*time.Second, "converged", func() bool {
		st := a.Status()
		return len(st.Resources) == 1 && st.State == StateConverged
	})
	path := filepath.Join(cfg.DataDir, DefaultControlSocket)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %s: %v, mode %v; want a socket of mode 0600", path, err, fi.Mode())
	}
	ctx := t.Context()
	for req, want := range map[ControlRequest]string{
		{Op: OpOverride, Resource: "pos/motd", For: "24h"}:               "give a reason",
		{Op: OpOverride, Resource: "pos/nope", For: "24h", Reason: "x"}:  `no resource "pos/nope" in the desired state`,
		{Op: OpOverride, Resource: "pos/motd", For: "999h", Reason: "x"}: "longer than 720h0m0s",
		{Op: OpOverride, Resource: "pos/motd", For: "soon", Reason: "x"}: `--for "soon" is not a positive duration`,
		{Op: "frob"}: `unknown operation "frob"`,
	} {
		if _, err := Control(ctx, path, req); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", req, err, want)
		}
	}
	resp, err := Control(ctx, path, ControlRequest{Op: OpOverride, Resource: "pos/motd", For: "24h", Reason: "vendor hotfix"})
	if err != nil || !strings.HasPrefix(resp.Message, "pos/motd overridden until ") {
		t.Fatalf("override: %v %+v", err, resp)
	}
	c.wait(t, 10*time.Second, "the override reported", func() bool {
		rep := c.lastReport()
		if rep == nil || len(rep.Resources) != 1 {
			return false
		}
		h := rep.Resources[0].Hold
		return h.Kind == wire.HoldOverride && h.Note == "vendor hotfix" && strings.HasPrefix(h.Holder, "uid ") && h.Until > time.Now().Add(23*time.Hour).UnixNano()
	})
	list, err := Control(ctx, path, ControlRequest{Op: OpOverrides})
	if err != nil || len(list.Overrides) != 1 || list.Overrides[0].Resource != "pos/motd" {
		t.Fatalf("overrides: %v %+v", err, list)
	}
	if _, err := Control(ctx, path, ControlRequest{Op: OpClearOverride, Resource: "pos/motd"}); err != nil {
		t.Fatal(err)
	}
	c.wait(t, 10*time.Second, "the override gone", func() bool {
		rep := c.lastReport()
		return rep != nil && rep.Resources[0].Hold.Kind == wire.HoldNone
	})
}
