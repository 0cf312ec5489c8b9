package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meteor-edge/meteor/chaos"
)

var testServers = []Server{
	{ID: "s1", Host: "10.0.0.1", Addr: "10.0.0.1:8470"},
	{ID: "s2", Host: "10.0.0.2", Addr: "10.0.0.2:8470"},
	{ID: "s3", Host: "10.0.0.3", Addr: "10.0.0.3:8470"},
	{ID: "s4", Host: "10.0.0.4", Addr: "10.0.0.4:8470"},
	{ID: "s5", Host: "10.0.0.5", Addr: "10.0.0.5:8470"},
}

func TestCommandsExpand(t *testing.T) {
	c := &Commands{Servers: testServers, Templates: map[Action]string{
		Kill: "ssh {host} sudo systemctl kill -s KILL meteor # {id} {addr}",
		Cut:  "ssh {host} nft add rule inet filter input ip saddr {peer_host} drop # {peer_id} {peer_addr}",
	}}
	for _, tc := range []struct {
		a       Action
		i, peer int
		want    string
		err     bool
	}{
		{a: Kill, i: 1, peer: -1, want: "ssh 10.0.0.2 sudo systemctl kill -s KILL meteor # s2 10.0.0.2:8470"},
		{a: Cut, i: 0, peer: 4, want: "ssh 10.0.0.1 nft add rule inet filter input ip saddr 10.0.0.5 drop # s5 10.0.0.5:8470"},
		{a: Start, i: 1, peer: -1, err: true}, // no template
		{a: Kill, i: 5, peer: -1, err: true},  // no such server
		{a: Cut, i: 2, peer: 2, err: true},    // a server cut from itself
		{a: Cut, i: 2, peer: -1, err: true},   // no peer
		{a: Kill, i: 2, peer: 3, err: true},   // a peer where none is taken
	} {
		got, err := c.Expand(tc.a, tc.i, tc.peer)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Expand(%s, %d, %d) = %q, %v; want %q, error %v", tc.a, tc.i, tc.peer, got, err, tc.want, tc.err)
		}
	}
	if _, err := c.Expand(Start, 0, -1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Expand without a template: %v, want ErrUnsupported", err)
	}
	if !c.Supports(Kill) || c.Supports(Pause) {
		t.Errorf("Supports: kill %v pause %v, want true false", c.Supports(Kill), c.Supports(Pause))
	}
}

func TestCommandsDoReportsFailure(t *testing.T) {
	c := &Commands{Servers: testServers, Templates: map[Action]string{Kill: "echo cannot reach {host} >&2; exit 3"}}
	line, err := c.Do(context.Background(), Kill, 0, -1)
	if err == nil || !strings.Contains(err.Error(), "cannot reach 10.0.0.1") {
		t.Fatalf("Do of a failing command: %q, %v; want an error with its output", line, err)
	}
}

func TestPlanIsSeeded(t *testing.T) {
	d := &Commands{Servers: testServers, Templates: map[Action]string{Kill: "true", Start: "true", Pause: "true", Unpause: "true"}}
	cfg := PlanConfig{Seed: 7, Duration: time.Minute}
	a, err := NewPlan(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewPlan(cfg, d)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two plans from seed 7 differ:\n%s\n%s", a, b)
	}
	cfg.Seed = 8
	c, _ := NewPlan(cfg, d)
	if reflect.DeepEqual(a.Episodes, c.Episodes) {
		t.Fatalf("seeds 7 and 8 gave the same plan:\n%s", a)
	}
	if len(a.Episodes) < 5 {
		t.Fatalf("a 1-minute plan has %d faults:\n%s", len(a.Episodes), a)
	}
	kinds := map[Fault]bool{}
	for i, e := range a.Episodes {
		kinds[e.Fault] = true
		if e.Start+e.Hold > cfg.Duration || (i > 0 && e.Start < a.Episodes[i-1].Start+a.Episodes[i-1].Hold) {
			t.Errorf("episode %d (%v+%v) overlaps another or ends after the run", i, e.Start, e.Hold)
		}
		switch e.Fault {
		case KillLeader, KillFollower, PauseLeader:
		default:
			t.Errorf("episode %d is %s, which the driver cannot inject", i, e.Fault)
		}
	}
	if len(kinds) != 3 {
		t.Errorf("a 1-minute plan used only %v of the 3 kinds the driver can inject", kinds)
	}
	if _, err := NewPlan(PlanConfig{Seed: 1, Duration: time.Minute, Faults: []Fault{CutPair}}, d); err == nil {
		t.Error("a plan of cuts for a driver that cannot cut: no error")
	}
}

func TestEpisodeSteps(t *testing.T) {
	e := Episode{Fault: PartitionMinority, Pick: 3}
	cut := e.Steps(5, 2, true)
	if len(cut) != 6 {
		t.Fatalf("minority partition of 5 with cuts: %d steps, want 2x3: %v", len(cut), cut)
	}
	minority := map[int]bool{}
	for _, s := range cut {
		if s.Action != Cut {
			t.Fatalf("step %v, want cuts", s)
		}
		minority[s.Server] = true
	}
	if len(minority) != 2 || !minority[2] {
		t.Errorf("minority %v, want the leader (2) and one follower", minority)
	}
	iso := e.Steps(5, 2, false)
	if len(iso) != 2 || iso[0] != (Step{Action: Isolate, Server: 2, Peer: -1}) {
		t.Errorf("minority partition without cuts: %v, want the leader and a follower isolated", iso)
	}
	if got := (Episode{Fault: KillFollower, Pick: 9}).Steps(3, 1, true); len(got) != 1 || got[0].Server == 1 || got[0].Action != Kill {
		t.Errorf("kill-follower with leader 1: %v", got)
	}
	if got := (Episode{Fault: PauseLeader}).Steps(3, 1, true); got[0] != (Step{Action: Pause, Server: 1, Peer: -1}) {
		t.Errorf("pause-leader with leader 1: %v", got)
	}
	undo := Undo(cut)
	if len(undo) != len(cut) || undo[0] != (Step{Action: Mend, Server: cut[5].Server, Peer: cut[5].Peer}) {
		t.Errorf("Undo: %v", undo)
	}
}

// runCommands runs a plan through a Commands driver whose templates
// append to a file, and returns the file and the fault log.
func runCommands(t *testing.T, seed uint64) (string, []chaos.Fault, int, Plan) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "actions")
	tmpl := map[Action]string{}
	for _, a := range Actions() {
		tmpl[a] = fmt.Sprintf("echo %s {id} {peer_id} >> %s", a, out)
	}
	d := &Commands{Servers: testServers, Templates: tmpl}
	plan, err := NewPlan(PlanConfig{Seed: seed, Duration: 30 * time.Second}, d)
	if err != nil {
		t.Fatal(err)
	}
	faults := chaos.NewFaultLog()
	r := &Runner{Driver: d, Servers: testServers, Faults: faults, Leader: func(context.Context) int { return 3 }}
	var injected int
	synctest.Test(t, func(t *testing.T) {
		if err := r.Run(context.Background(), plan); err != nil {
			t.Fatal(err)
		}
		injected = r.Injected()
	})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), faults.Faults(), injected, plan
}

// TestRunnerReplays runs the same seeded plan twice through real shell
// commands: the same commands run in the same order, each is in the fault
// log, and every fault is undone.
func TestRunnerReplays(t *testing.T) {
	first, faults, injected, plan := runCommands(t, 42)
	second, _, _, _ := runCommands(t, 42)
	if first != second {
		t.Fatalf("seed 42 ran different commands:\n%s\n---\n%s", first, second)
	}
	other, _, _, _ := runCommands(t, 43)
	if other == first {
		t.Fatalf("seeds 42 and 43 ran the same commands:\n%s", first)
	}
	t.Logf("%s", plan)
	if injected != len(plan.Episodes) || injected == 0 {
		t.Fatalf("injected %d faults, plan has %d", injected, len(plan.Episodes))
	}
	lines := strings.Split(strings.TrimSpace(first), "\n")
	if len(lines) != len(faults) {
		t.Fatalf("%d commands ran, %d faults logged", len(lines), len(faults))
	}
	balance := map[string]int{}
	for i, f := range faults {
		want := strings.TrimSpace(fmt.Sprintf("%s %s %s", f.Kind, f.From, f.To))
		if strings.TrimSpace(lines[i]) != want {
			t.Errorf("command %d ran %q, fault log says %q", i, lines[i], want)
		}
		if !strings.Contains(f.Detail, "echo "+f.Kind+" "+f.From) {
			t.Errorf("fault %d detail %q does not hold the expanded command", i, f.Detail)
		}
		a := Action(f.Kind)
		key := f.From + ">" + f.To
		if u := a.Undo(); u != "" {
			balance[string(a)+" "+key]++
		} else {
			for _, b := range Actions() {
				if b.Undo() == a {
					balance[string(b)+" "+key]--
				}
			}
		}
	}
	for k, v := range balance {
		if v != 0 {
			t.Errorf("%s: %d more faults than undos", k, v)
		}
	}
}

// TestRunnerRestoresOnCancel stops a run in the middle of a fault: the
// runner still undoes it before returning.
func TestRunnerRestoresOnCancel(t *testing.T) {
	out := filepath.Join(t.TempDir(), "actions")
	d := &Commands{Servers: testServers[:3], Templates: map[Action]string{
		Kill: "echo kill {id} >> " + out, Start: "echo start {id} >> " + out,
	}}
	plan := Plan{Seed: 1, Episodes: []Episode{{Start: time.Second, Hold: time.Hour, Fault: KillLeader}}}
	r := &Runner{Driver: d, Servers: testServers[:3], Leader: func(context.Context) int { return 0 }}
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error)
		go func() { done <- r.Run(ctx, plan) }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if !r.Unavailable(0) {
			t.Error("s1 should be down during the fault")
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	b, _ := os.ReadFile(out)
	if got := string(b); got != "kill s1\nstart s1\n" {
		t.Fatalf("commands run: %q, want the kill undone", got)
	}
	if r.Unavailable(0) || r.Generation(0) != 1 {
		t.Fatalf("after the run: unavailable %v, generation %d", r.Unavailable(0), r.Generation(0))
	}
}
