package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm"
)

func TestOwnerOfProperties(t *testing.T) {
	servers := []ownerCandidate{{ID: "eu-1", Region: "eu"}, {ID: "eu-2", Region: "eu"}, {ID: "us-1", Region: "us"}, {ID: "us-2", Region: "us"}, {ID: "ap-1", Region: "ap"}}
	const n = 3000
	devices := make([]struct{ id, region string }, n)
	for i := range devices {
		devices[i].id = fmt.Sprintf("dev-%d", i)
		devices[i].region = []string{"eu", "us", "ap", "sa"}[i%4]
	}
	owners := map[string]string{}
	share := map[string]int{}
	for _, d := range devices {
		o := ownerOf(d.id, d.region, servers)
		owners[d.id] = o
		share[o]++
		// Devices of a region with servers stay in it.
		if d.region != "sa" && o[:2] != d.region {
			t.Fatalf("%s (%s) owned by %s", d.id, d.region, o)
		}
	}
	// Region "sa" has no server: its devices spread over all of them.
	for _, s := range servers {
		if share[s.ID] == 0 {
			t.Errorf("%s owns nothing: %v", s.ID, share)
		}
	}
	// Removing a server moves only its devices; adding it back moves them back.
	without := []ownerCandidate{servers[0], servers[2], servers[3], servers[4]}
	moved := 0
	for _, d := range devices {
		o := ownerOf(d.id, d.region, without)
		if o != owners[d.id] {
			moved++
			if owners[d.id] != "eu-2" {
				t.Fatalf("%s moved from %s to %s though %s is alive", d.id, owners[d.id], o, owners[d.id])
			}
		}
	}
	if moved != share["eu-2"] {
		t.Fatalf("%d devices moved, eu-2 owned %d", moved, share["eu-2"])
	}
	if ownerOf("x", "eu", nil) != "" {
		t.Fatal("an owner without servers")
	}
}

// TestDeviceOwnerFollowsTheSession: a device in session is owned by the
// server holding it when that server is a candidate of its region (or its
// region has none) and every candidate follows sessions; any other device
// by its home owner.
func TestDeviceOwnerFollowsTheSession(t *testing.T) {
	servers := []ownerCandidate{
		{ID: "eu-1", Region: "eu", PeerAPI: peerAPISessionOwner},
		{ID: "eu-2", Region: "eu", PeerAPI: peerAPISessionOwner},
		{ID: "us-1", Region: "us", PeerAPI: peerAPISessionOwner},
	}
	// A device whose home owner is eu-1, so that following the session
	// to eu-2 shows.
	id := ""
	for i := 0; id == ""; i++ {
		if d := fmt.Sprintf("dev-%d", i); ownerOf(d, "eu", servers) == "eu-1" {
			id = d
		}
	}
	older := slices.Clone(servers)
	older[2].PeerAPI = peerAPIReportBatch
	for _, tc := range []struct {
		name      string
		region    string
		connected bool
		server    string
		servers   []ownerCandidate
		want      string
	}{
		{"in session in its region", "eu", true, "eu-2", servers, "eu-2"},
		{"in session on its home owner", "eu", true, "eu-1", servers, "eu-1"},
		{"disconnected", "eu", false, "eu-2", servers, "eu-1"},
		{"connected with no server named", "eu", true, "", servers, "eu-1"},
		{"in session outside its region", "eu", true, "us-1", servers, "eu-1"},
		{"in session on a server that cannot own", "eu", true, "eu-3", servers, "eu-1"},
		{"in session, its region without servers", "sa", true, "us-1", servers, "us-1"},
		{"a candidate of an earlier release", "eu", true, "eu-2", older, "eu-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &fsm.DeviceRecord{ID: id, Labels: map[string]string{"region": tc.region}, Connected: tc.connected, Server: tc.server}
			if got := deviceOwner(rec, tc.servers); got != tc.want {
				t.Errorf("owner %q, want %q", got, tc.want)
			}
		})
	}
	if got := deviceOwner(&fsm.DeviceRecord{ID: id, Connected: true, Server: "eu-1"}, nil); got != "" {
		t.Errorf("owner %q without servers", got)
	}
}

// TestOwnershipFollowsMembership runs real servers with gossip on loopback:
// every server names the same owner for every device; killing a server moves
// only its devices, within failure detection; restarting it moves them back.
func TestOwnershipFollowsMembership(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d-servers", n), func(t *testing.T) {
			c := newTestCluster(t, n, nil)
			labels := func(i int) map[string]string { return map[string]string{"region": "eu"} }
			owners := func() (map[string]string, error) {
				out := map[string]string{}
				for i := range 600 {
					id := fmt.Sprintf("dev-%d", i)
					var want string
					for _, s := range c.alive() {
						o := s.OwnerOf(id, labels(i))
						if want == "" {
							want = o
						} else if o != want {
							return nil, fmt.Errorf("%s: %s says %s, another says %s", id, s.ID(), o, want)
						}
					}
					out[id] = want
				}
				return out, nil
			}
			var before map[string]string
			waitFor(t, 10*time.Second, func() (err error) { before, err = owners(); return err })
			victim := c.index(c.follower())
			vid := c.ID(victim)
			c.kill(victim)
			start := time.Now()
			var after map[string]string
			waitFor(t, 20*time.Second, func() error {
				var err error
				if after, err = owners(); err != nil {
					return err
				}
				for id, o := range after {
					if o == vid {
						return fmt.Errorf("%s still owned by the dead server", id)
					}
				}
				return nil
			})
			t.Logf("%d-server cluster: devices moved off %s in %s", n, vid, time.Since(start).Round(time.Millisecond))
			for id, o := range after {
				if before[id] != vid && o != before[id] {
					t.Fatalf("%s moved from alive %s to %s", id, before[id], o)
				}
			}
			c.restart(victim)
			waitFor(t, 20*time.Second, func() error {
				now, err := owners()
				if err != nil {
					return err
				}
				for id, o := range now {
					if o != before[id] {
						return fmt.Errorf("%s owned by %s, was %s", id, o, before[id])
					}
				}
				return nil
			})
			own, err := client(c.alive()[0]).Ownership(context.Background())
			if err != nil || len(own.Servers) != n {
				t.Fatalf("ownership: %+v %v", own, err)
			}
		})
	}
}
