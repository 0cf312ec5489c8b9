package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/meteor-edge/meteor/agent/journal"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// The agent's local control socket: a unix socket in the data directory
// (Config.ControlSocket) through which people and workloads on the device
// talk to the running agent (meteor agent override, meteor agent lock).
// Its authentication is the file system's: the socket is created mode
// 0600 in a directory of mode 0700, so only the agent's own user (and
// root) can connect; on Linux the agent also checks the peer's user with
// SO_PEERCRED, and records who asked. One JSON request per connection,
// one JSON answer.

// DefaultControlSocket is the control socket's name in the data
// directory.
const DefaultControlSocket = "agent.sock"

// maxControlRequest bounds a request's size.
const maxControlRequest = 64 << 10

// Control operations.
const (
	OpOverride      = "override"       // pin a resource (Resource, Reason, For)
	OpClearOverride = "clear-override" // end a pin early (Resource)
	OpOverrides     = "overrides"      // list the pins
	OpLockAcquire   = "lock-acquire"   // take a workload lock (Lock, Holder, MaxHold)
	OpLockRelease   = "lock-release"   // release one (Lock)
	OpLocks         = "locks"          // list the locks held
)

// ControlRequest is a request to the control socket.
type ControlRequest struct {
	Op       string `json:"op"`
	Resource string `json:"resource,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// For is how long, as a Go duration ("24h").
	For string `json:"for,omitempty"`
	// Lock names a workload lock; Holder says who holds it (default: the
	// local user asking); MaxHold how long it may be held before it is
	// stale, as a Go duration.
	Lock    string `json:"lock,omitempty"`
	Holder  string `json:"holder,omitempty"`
	MaxHold string `json:"max_hold,omitempty"`
}

// ControlResponse answers a ControlRequest.
type ControlResponse struct {
	// Error says why the request was refused; empty when it was done.
	Error     string         `json:"error,omitempty"`
	Message   string         `json:"message,omitempty"`
	Overrides []OverrideInfo `json:"overrides,omitempty"`
	Locks     []LockInfo     `json:"locks,omitempty"`
}

// LockInfo is a workload lock as the control socket lists it.
type LockInfo struct {
	Name    string    `json:"name"`
	Holder  string    `json:"holder"`
	Since   time.Time `json:"since"`
	MaxHold string    `json:"max_hold,omitempty"`
	// File is the lock file holding it; empty for a lock taken through
	// the agent.
	File  string `json:"file,omitempty"`
	Stale bool   `json:"stale,omitempty"`
}

// MaxLockHold bounds a lock's maximum hold.
const MaxLockHold = 7 * 24 * time.Hour

// OverrideInfo is a local override as the control socket lists it.
type OverrideInfo struct {
	Resource string    `json:"resource"`
	Reason   string    `json:"reason"`
	Until    time.Time `json:"until"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
}

// MaxOverride bounds how long an override may last: a pin must come up
// for review.
const MaxOverride = 30 * 24 * time.Hour

// Control sends req to the agent's control socket at path and returns its
// answer; a refusal is an error too.
func Control(ctx context.Context, path string, req ControlRequest) (*ControlResponse, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("agent control socket %s: %w (is the agent running, and are you its user?)", path, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, fmt.Errorf("agent control socket %s: %w", path, err)
	}
	var resp ControlResponse
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		return nil, fmt.Errorf("agent control socket %s: no answer: %w", path, err)
	}
	if resp.Error != "" {
		return &resp, errors.New(resp.Error)
	}
	return &resp, nil
}

// controlServer serves the control socket.
type controlServer struct {
	a  *Agent
	ln *net.UnixListener
}

// listenControl opens the control socket: mode 0600, replacing a file a
// crashed agent left (the journal, which this agent holds, proves no
// other agent runs on the data directory).
func (a *Agent) listenControl() (*controlServer, error) {
	path := a.controlPath()
	if path == "" {
		return nil, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return &controlServer{a: a, ln: ln}, nil
}

// controlPath is the control socket's path; "" for none.
func (a *Agent) controlPath() string {
	switch p := a.cfg.ControlSocket; p {
	case "-":
		return ""
	case "":
		return filepath.Join(a.cfg.DataDir, DefaultControlSocket)
	default:
		return p
	}
}

// serve answers requests until ctx ends, then closes the socket and
// waits for the requests in progress.
func (c *controlServer) serve(ctx context.Context) {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { c.ln.Close() })
	defer stop()
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil {
				c.a.log.Error("control socket", "error", err)
			}
			break
		}
		wg.Go(func() { c.handle(ctx, conn) })
	}
	wg.Wait()
	os.Remove(c.ln.Addr().String())
}

func (c *controlServer) handle(ctx context.Context, conn *net.UnixConn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	enc := json.NewEncoder(conn)
	who, err := peerOf(conn)
	if err != nil {
		enc.Encode(ControlResponse{Error: err.Error()})
		return
	}
	var req ControlRequest
	if err := json.NewDecoder(bufio.NewReader(&limitedReader{r: conn, n: maxControlRequest})).Decode(&req); err != nil {
		enc.Encode(ControlResponse{Error: fmt.Sprintf("bad request: %v", err)})
		return
	}
	resp, err := c.a.control(ctx, who, req)
	if err != nil {
		resp = &ControlResponse{Error: err.Error()}
	}
	if err := enc.Encode(resp); err != nil {
		c.a.log.Debug("control answer not sent", "error", err)
	}
}

// control carries out a request of who.
func (a *Agent) control(ctx context.Context, who string, req ControlRequest) (*ControlResponse, error) {
	now := a.cfg.Clock.Now()
	switch req.Op {
	case OpOverride:
		d, err := time.ParseDuration(req.For)
		switch {
		case req.For == "":
			return nil, errors.New("override: say for how long (--for 24h)")
		case err != nil || d <= 0:
			return nil, fmt.Errorf("override: --for %q is not a positive duration such as 24h", req.For)
		case d > MaxOverride:
			return nil, fmt.Errorf("override: --for %v is longer than %v", d, MaxOverride)
		case req.Reason == "" || len(req.Reason) > 1024:
			return nil, errors.New("override: give a reason (--reason TEXT, at most 1024 bytes): it is reported to the control plane")
		}
		if err := a.desiredKey(req.Resource); err != nil {
			return nil, fmt.Errorf("override: %w", err)
		}
		o := journal.Override{Key: req.Resource, Reason: req.Reason, Until: now.Add(d), By: who, At: now}
		if err := a.j.SetOverride(o); err != nil {
			return nil, err
		}
		a.log.Info("local override set", "resource", o.Key, "until", o.Until, "by", who, "reason", o.Reason)
		a.rec.trigger()
		return &ControlResponse{Message: fmt.Sprintf("%s overridden until %s: the agent leaves it as it is on the device and reports it overridden", o.Key, o.Until.UTC().Format(time.RFC3339))}, nil
	case OpClearOverride:
		ok, err := a.j.ClearOverride(req.Resource)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("no override of %q", req.Resource)
		}
		a.log.Info("local override cleared", "resource", req.Resource, "by", who)
		a.rec.trigger()
		return &ControlResponse{Message: req.Resource + ": override cleared; the agent corrects it again"}, nil
	case OpOverrides:
		all, err := a.j.Overrides()
		if err != nil {
			return nil, err
		}
		resp := &ControlResponse{}
		for _, k := range slices.Sorted(maps.Keys(all)) {
			if o := all[k]; o.Until.After(now) {
				resp.Overrides = append(resp.Overrides, OverrideInfo{Resource: k, Reason: o.Reason, Until: o.Until, By: o.By, At: o.At})
			}
		}
		return resp, nil
	case OpLockAcquire:
		if _, err := intent.ParseRequirement("lock:" + req.Lock); err != nil || req.Lock == "" {
			return nil, fmt.Errorf("lock acquire: %q is not a lock name (1-128 of A-Z, a-z, 0-9, '.', '_' and '-')", req.Lock)
		}
		d, err := time.ParseDuration(req.MaxHold)
		if err != nil || d <= 0 || d > MaxLockHold {
			return nil, fmt.Errorf("lock acquire: --max-hold %q is not a duration from 1s to %v", req.MaxHold, MaxLockHold)
		}
		holder := req.Holder
		if holder == "" {
			holder = who
		}
		l := journal.Lock{Name: req.Lock, Holder: truncate(holder, 256), Since: now, MaxHold: d, By: who}
		if err := a.j.AcquireLock(l); err != nil {
			return nil, fmt.Errorf("lock acquire: %w", err)
		}
		a.log.Info("workload lock taken", "lock", l.Name, "holder", l.Holder, "max_hold", d, "by", who)
		a.rec.trigger()
		return &ControlResponse{Message: fmt.Sprintf("lock %s taken by %s; stale after %v", l.Name, l.Holder, d)}, nil
	case OpLockRelease:
		_, ok, err := a.j.ReleaseLock(req.Lock, time.Time{})
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("lock release: no lock %q taken through the agent (a lock file is released by removing it)", req.Lock)
		}
		a.log.Info("workload lock released", "lock", req.Lock, "by", who)
		a.rec.trigger()
		return &ControlResponse{Message: "lock " + req.Lock + " released"}, nil
	case OpLocks:
		locks, err := a.rec.locks.held()
		if err != nil {
			return nil, err
		}
		resp := &ControlResponse{}
		for _, name := range slices.Sorted(maps.Keys(locks)) {
			l := locks[name]
			li := LockInfo{Name: name, Holder: l.holder, Since: l.since, File: l.path, Stale: l.stale(now)}
			if l.maxHold > 0 {
				li.MaxHold = l.maxHold.String()
			}
			resp.Locks = append(resp.Locks, li)
		}
		return resp, nil
	}
	return nil, fmt.Errorf("unknown operation %q", req.Op)
}

// desiredKey checks that key is a resource of the desired state.
func (a *Agent) desiredKey(key string) error {
	set, err := a.j.Desired()
	if err != nil {
		return err
	}
	for _, r := range set.Resources {
		if r.Key == key {
			return nil
		}
	}
	return fmt.Errorf("no resource %q in the desired state (resources are INTENT/ID)", key)
}

// limitedReader fails a read past n bytes, so that a request cannot grow
// without bound.
type limitedReader struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request too large")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= n
	return n, err
}
