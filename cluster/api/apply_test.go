package api_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
)

const doc = `name: motd
selector: {role: kiosk}
resources:
  - type: file
    id: motd
    spec: {path: /etc/motd, content: "hello\n"}
`

// devServer starts a real single-server cluster (Raft on raft-boltdb in a
// temporary dir, HTTP on loopback) and returns its HTTP address.
func devServer(t *testing.T) string {
	t.Helper()
	cfg := cluster.DefaultConfig()
	cfg.NodeID = "s1"
	cfg.Dev = true
	cfg.DataDir = filepath.Join(t.TempDir(), "s1")
	cfg.HTTPAddr, cfg.RaftAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logger = hclog.NewNullLogger()
	s, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	c := api.NewClient(s.HTTPAddr(), nil)
	c.RetryNoLeader = 30 * time.Second
	if _, err := c.ListIntents(context.Background(), api.ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	return s.HTTPAddr()
}

// faultyTransport passes requests to the real server and injects one
// fault into the first PUT: either the request is lost before it reaches
// the server (nothing written), or the server's answer is lost after it
// committed the write (outcome unknown to the client).
type faultyTransport struct {
	afterCommit bool
	puts        atomic.Int32
}

func (f *faultyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut || f.puts.Add(1) > 1 {
		return http.DefaultTransport.RoundTrip(r)
	}
	if !f.afterCommit {
		return nil, errors.New("injected: connection reset before the request was sent")
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body.Close()
	}
	return nil, errors.New("injected: connection reset before the answer arrived")
}

func TestApplyIntentRetriesWithoutWritingTwice(t *testing.T) {
	for _, tc := range []struct {
		name        string
		afterCommit bool
		puts        int32 // PUTs sent, the faulty one included
		retries     int   // attempts retried
	}{
		{"lost before the server", false, 2, 1},
		// The read after the lost answer finds the document written.
		{"answer lost after the commit", true, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := devServer(t)
			ft := &faultyTransport{afterCommit: tc.afterCommit}
			c := api.NewClient(addr, &http.Client{Transport: ft})
			var retried []error
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := c.ApplyIntent(ctx, "motd", []byte(doc), func(err error) { retried = append(retried, err) })
			if err != nil {
				t.Fatal(err)
			}
			if got := ft.puts.Load(); got != tc.puts {
				t.Errorf("%d PUTs sent, want %d", got, tc.puts)
			}
			if len(retried) != tc.retries {
				t.Errorf("retried %d errors, want %d: %v", len(retried), tc.retries, retried)
			}
			// One write: the intent's first and only revision is the one
			// returned, whichever attempt made it.
			got, err := api.NewClient(addr, nil).GetIntent(ctx, "motd", api.ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Revision != res.Revision || got.CreateRevision != res.Revision {
				t.Errorf("intent at revision %d (created %d), ApplyIntent returned %d: written twice?", got.Revision, got.CreateRevision, res.Revision)
			}
		})
	}
}

func TestApplyIntentRefusesInvalidDocument(t *testing.T) {
	c := api.NewClient(devServer(t), nil)
	_, err := c.ApplyIntent(context.Background(), "bad", []byte("name: bad\nresources: [{type: nope}]\n"), func(err error) {
		t.Errorf("retried %v", err)
	})
	if err == nil {
		t.Fatal("invalid document applied")
	}
}
