package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
)

// system is a running three-server cluster under test.
type system struct {
	name    string
	version string
	procs   []*benchkit.Proc
	ids     []string // server names, in the order of bases
	bases   []string // "http://127.0.0.1:PORT" client endpoints
	// leader reports the current leader's server name.
	leader func(ctx context.Context) (string, error)
	// term reports the highest Raft term of the servers: the elections
	// held in a window are its growth (benchkit.Elections).
	term func(ctx context.Context) (uint64, error)
	// mc is Meteor's cluster (nil for etcd).
	mc *benchkit.MeteorCluster
}

// procOf returns the process of the named server.
func (s *system) procOf(id string) *benchkit.Proc {
	for i, x := range s.ids {
		if x == id {
			return s.procs[i]
		}
	}
	return nil
}

// startMeteor starts three `meteor server` processes that form a cluster
// (benchkit.StartMeteor) and waits until each reports a leader.
func startMeteor(ctx context.Context, g *benchkit.Group, bin, dir string) (*system, error) {
	mc, err := benchkit.StartMeteor(ctx, g, benchkit.MeteorOptions{Bin: bin, Dir: dir})
	if err != nil {
		return nil, err
	}
	sys := &system{name: "meteor", version: mc.Version, ids: mc.IDs(), bases: mc.URLs(), term: mc.RaftTerm, mc: mc}
	for _, s := range mc.Servers {
		sys.procs = append(sys.procs, s.Proc)
	}
	sys.leader = func(ctx context.Context) (string, error) {
		i, err := mc.Leader(ctx)
		if err != nil {
			return "", err
		}
		return mc.Servers[i].ID, nil
	}
	return sys, nil
}

// findEtcd returns the etcd binary: the flag's path, etcd on PATH, or
// /usr/bin/etcd. If there is none and install is set, it runs
// install-etcd.sh (Debian's etcd-server package; root only) first. It
// returns "" with a reason when etcd cannot be had.
func findEtcd(ctx context.Context, flagPath, installScript string, install bool) (bin, reason string, err error) {
	if flagPath != "" {
		if _, err := os.Stat(flagPath); err != nil {
			return "", "", fmt.Errorf("-etcd-bin: %w", err)
		}
		return flagPath, "", nil
	}
	look := func() string {
		if p, err := exec.LookPath("etcd"); err == nil {
			return p
		}
		if _, err := os.Stat("/usr/bin/etcd"); err == nil {
			return "/usr/bin/etcd"
		}
		return ""
	}
	if p := look(); p != "" {
		return p, "", nil
	}
	if !install {
		return "", "etcd is not installed (apt-get install -y etcd-server) and -install-etcd=false", nil
	}
	fmt.Fprintf(os.Stderr, "etcd not found: running %s\n", installScript)
	cmd := exec.CommandContext(ctx, "sh", installScript)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		return "", fmt.Sprintf("etcd could not be installed (%v); see the message above", err), nil
	}
	if p := look(); p != "" {
		return p, "", nil
	}
	return "", "etcd is still missing after installing etcd-server", nil
}

// etcdVersion returns the version `etcd --version` prints.
func etcdVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd Version:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("%s --version: no version in %q", bin, out)
}

// etcdQuotaBytes is the backend quota: etcd's maximum (8 GiB), so that a
// long run of overwrites never raises the NOSPACE alarm before
// compaction would have been needed anyway.
const etcdQuotaBytes = 8 << 30

// startEtcd starts a three-member etcd cluster with a static initial
// cluster on loopback ports, default durability (fsync on), and waits until
// every member is healthy. It returns the gateway's put path too.
func startEtcd(ctx context.Context, g *benchkit.Group, hc *http.Client, bin, dir string) (*system, string, error) {
	const n = 3
	ports, err := benchkit.FreePorts(2*n, false)
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	sys := &system{name: "etcd"}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("etcd-%d=http://%s", i+1, benchkit.Loopback(ports[2*i+1])))
	}
	token := fmt.Sprintf("bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	for i := range n {
		id := fmt.Sprintf("etcd-%d", i+1)
		client := "http://" + benchkit.Loopback(ports[2*i])
		peer := "http://" + benchkit.Loopback(ports[2*i+1])
		args := []string{
			"--name", id,
			"--data-dir", filepath.Join(dir, id),
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--quota-backend-bytes", strconv.FormatInt(etcdQuotaBytes, 10),
			"--logger", "zap",
		}
		p, err := g.Start(id, bin, args, nil, dir, filepath.Join(dir, id+".log"))
		if err != nil {
			return nil, "", err
		}
		sys.procs = append(sys.procs, p)
		sys.ids = append(sys.ids, id)
		sys.bases = append(sys.bases, client)
	}
	for i, base := range sys.bases {
		err := benchkit.WaitFor(ctx, 60*time.Second, 200*time.Millisecond, sys.procs[i], func(ctx context.Context) error {
			var h struct {
				Health string `json:"health"`
			}
			code, err := getJSON(ctx, hc, base+"/health", &h)
			if err != nil {
				return err
			}
			if code != http.StatusOK || h.Health != "true" {
				return fmt.Errorf("health: HTTP %d, health %q", code, h.Health)
			}
			return nil
		})
		if err != nil {
			return sys, "", fmt.Errorf("etcd member %s: %w", sys.ids[i], err)
		}
	}
	putPath, err := etcdGatewayPath(ctx, hc, sys.bases[0])
	if err != nil {
		return sys, "", err
	}
	prefix := strings.TrimSuffix(putPath, "/kv/put")
	sys.leader = func(ctx context.Context) (string, error) {
		// IDs are uint64s, which the gateway encodes as strings.
		var st struct {
			Header struct {
				MemberID string `json:"member_id"`
			} `json:"header"`
			Leader string `json:"leader"`
		}
		for i, base := range sys.bases {
			if _, err := postJSON(ctx, hc, base+prefix+"/maintenance/status", []byte("{}"), &st); err != nil {
				return "", err
			}
			if st.Leader != "" && st.Header.MemberID == st.Leader {
				return sys.ids[i], nil
			}
		}
		return "", errors.New("no member reports itself as leader")
	}
	sys.term = func(ctx context.Context) (uint64, error) {
		return etcdTerm(ctx, hc, sys.bases, prefix)
	}
	return sys, putPath, nil
}

// etcdTerm returns the highest Raft term the etcd members at bases report
// in their maintenance status (raftTerm, a uint64 the gateway encodes as a
// string), counted as Meteor's are: every election, won or not, starts a
// new term. Members that do not answer are passed over.
func etcdTerm(ctx context.Context, hc *http.Client, bases []string, prefix string) (uint64, error) {
	var top uint64
	var errs []error
	answered := false
	for _, base := range bases {
		var st struct {
			RaftTerm uint64 `json:"raftTerm,string"`
		}
		code, err := postJSON(ctx, hc, base+prefix+"/maintenance/status", []byte("{}"), &st)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("HTTP %d", code)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", base, err))
			continue
		}
		answered = true
		top = max(top, st.RaftTerm)
	}
	if !answered {
		return 0, fmt.Errorf("read etcd's Raft term: %w", errors.Join(errs...))
	}
	return top, nil
}

// etcdGatewayPath finds the gateway's put endpoint: /v3/kv/put on etcd
// 3.4 and later, /v3beta/kv/put on 3.3. It writes one probe key.
func etcdGatewayPath(ctx context.Context, hc *http.Client, base string) (string, error) {
	body, err := etcdPutBody("/meteor/bench-probe", []byte("probe"))
	if err != nil {
		return "", err
	}
	var errs []error
	for _, path := range []string{"/v3/kv/put", "/v3beta/kv/put"} {
		var out struct {
			Header *struct {
				Revision string `json:"revision"`
			} `json:"header"`
		}
		code, err := postJSON(ctx, hc, base+path, body, &out)
		if err == nil && code == http.StatusOK && out.Header != nil {
			return path, nil
		}
		errs = append(errs, fmt.Errorf("%s: HTTP %d: %v", path, code, err))
	}
	return "", fmt.Errorf("etcd's JSON gateway answers no known put path: %w", errors.Join(errs...))
}

func getJSON(ctx context.Context, hc *http.Client, url string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	return doJSON(hc, req, out)
}

func postJSON(ctx context.Context, hc *http.Client, url string, body []byte, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return doJSON(hc, req, out)
}

// doJSON sends req and decodes the answer into out whatever its status.
func doJSON(hc *http.Client, req *http.Request, out any) (int, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return resp.StatusCode, fmt.Errorf("decode %s: %w: %.200s", req.URL.Path, err, b)
	}
	return resp.StatusCode, nil
}
