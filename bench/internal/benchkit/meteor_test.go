package benchkit

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestParseChoices(t *testing.T) {
	got, err := ParseChoices("b, a,b", "parts", "a", "b", "c")
	if err != nil || !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("ParseChoices = %q, %v; want [b a]", got, err)
	}
	for _, bad := range []string{"", "a,d", "a,,b"} {
		if _, err := ParseChoices(bad, "parts", "a", "b"); err == nil {
			t.Errorf("ParseChoices(%q): no error", bad)
		}
	}
}

func TestFlagsParse(t *testing.T) {
	var f Flags
	other := ""
	fs := NewFlagSet("x", "About.", io.Discard)
	f.Register(fs, "data")
	fs.StringVar(&other, "other", "", "")
	if err := f.Parse(fs, []string{"-meteor-bin", "bin/meteor", "-out", "res", "-other", "o", "-keep"}, &other); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.MeteorBin, f.OutDir, other} {
		if !filepath.IsAbs(p) {
			t.Errorf("%q is not absolute", p)
		}
	}
	if !f.Keep {
		t.Error("-keep not set")
	}
	fs = NewFlagSet("x", "About.", io.Discard)
	f.Register(fs, "data")
	if err := f.Parse(fs, []string{"extra"}); err == nil {
		t.Error("a positional argument: no error")
	}
}

func TestStartMeteorRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []MeteorOptions{
		{Bin: "meteor", Dir: dir, IDs: []string{}},
		{Bin: "meteor", Dir: dir, Dev: true},
		{Bin: "meteor", Dir: dir, Agents: true},
	} {
		if _, err := StartMeteor(context.Background(), &Group{}, o); err == nil {
			t.Errorf("StartMeteor(%+v): no error", o)
		}
	}
}

// TestStartMeteor starts a three-server cluster of meteor processes,
// kills its leader and checks that the survivors elect another.
func TestStartMeteor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds meteor and starts a cluster")
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Skip(err)
	}
	bin := MeteorBinaryForTest(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	g := &Group{}
	defer g.StopAll(3 * time.Second)
	pki := filepath.Join(dir, "pki")
	if err := InitMeteorCA(ctx, bin, pki); err != nil {
		t.Fatal(err)
	}
	c, err := StartMeteor(ctx, g, MeteorOptions{Bin: bin, Dir: filepath.Join(dir, "cluster"), IDs: MeteorIDs("m", 3), Agents: true, PKI: pki})
	if err != nil {
		t.Fatal(err)
	}
	if c.Version == "" || !slices.Equal(c.IDs(), []string{"m-1", "m-2", "m-3"}) {
		t.Errorf("version %q, IDs %q", c.Version, c.IDs())
	}
	if ports := c.AgentPorts(); len(ports) != 3 || ports[0] == 0 {
		t.Errorf("agent ports %v", ports)
	}
	li, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Settle(ctx, time.Second, time.Minute); err != nil {
		t.Fatal(err)
	}
	term0, err := c.RaftTerm(ctx)
	if err != nil || term0 == 0 {
		t.Fatalf("term %d, %v", term0, err)
	}
	if cpu, err := c.CPUTime(); err != nil || cpu <= 0 {
		t.Errorf("CPU time %v, %v", cpu, err)
	}
	if err := c.Kill(li); err != nil {
		t.Fatal(err)
	}
	err = WaitFor(ctx, 10*time.Second, 20*time.Millisecond, nil, func(context.Context) error {
		if c.Exited() == nil {
			return errors.New("no server exited")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	next, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == li {
		t.Errorf("leader %d again after it was killed", li)
	}
	if n, err := c.ElectionsSince(ctx, term0); err != nil || n < 1 {
		t.Errorf("elections since the kill: %d, %v", n, err)
	}
}
