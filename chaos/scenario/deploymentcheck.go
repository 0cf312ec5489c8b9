package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/chaos/hosts"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// The checks of a deployment, over its HTTP API only.

// healthOf asks every server for its health at once; a nil entry did not
// answer.
func healthOf(ctx context.Context, addrs []string, wl *workload) []*api.Health {
	out := make([]*api.Health, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			hctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			cl := wl.apiClient(addr)
			cl.RetryNoLeader = 0
			if h, err := cl.Health(hctx); h != nil && h.Node != "" && (err == nil || h.RaftState != "") {
				out[i] = h
			}
		})
	}
	wg.Wait()
	return out
}

// leaderIndex returns the index of the server most servers name as leader
// and that says it leads, waiting up to 2 s for one, or -1.
func leaderIndex(ctx context.Context, addrs []string, wl *workload) int {
	deadline := time.Now().Add(2 * time.Second)
	for ctx.Err() == nil {
		hs := healthOf(ctx, addrs, wl)
		votes := map[string]int{}
		for _, h := range hs {
			if h != nil && h.Leader != "" {
				votes[h.Leader]++
			}
		}
		best, bestVotes := -1, 0
		for i, h := range hs {
			if h != nil && h.RaftState == "Leader" && votes[h.Node] > bestVotes {
				best, bestVotes = i, votes[h.Node]
			}
		}
		if best >= 0 || time.Now().After(deadline) {
			return best
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return -1
}

// stateDigest asks a server for the hash of its whole replicated state
// (GET /v1/internal/state-hash: fsm.FSM.StateHash over one snapshot of
// intents, history, devices, timelines and meta) and the Raft index it
// reflects. Servers at the same index must answer the same hash.
func stateDigest(ctx context.Context, addr string, wl *workload) (uint64, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api.BaseURL(addr)+"/v1/cluster/state-hash", nil)
	if err != nil {
		return 0, "", err
	}
	if wl.token != "" {
		req.Header.Set("Authorization", "Bearer "+wl.token)
	}
	resp, err := wl.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("GET /v1/cluster/state-hash from %s: %d: %s", addr, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var st fsm.StateHash
	if err := json.Unmarshal(body, &st); err != nil {
		return 0, "", fmt.Errorf("state hash from %s: %w", addr, err)
	}
	if st.Hash == "" {
		return 0, "", fmt.Errorf("state hash from %s: empty (a server without GET /v1/cluster/state-hash?)", addr)
	}
	return st.Index, st.Hash, nil
}

// waitAgreed waits until every server is healthy, names the same leader,
// and serves the same replicated state at the same Raft index, and
// returns that index and the state's digest. Servers that hold different
// states at one index keep it waiting; its error says so.
func waitAgreed(ctx context.Context, addrs []string, wl *workload) (uint64, string, error) {
	type answer struct {
		idx    uint64
		digest string
		err    error
	}
	var last error
	for {
		hs := healthOf(ctx, addrs, wl)
		last = nil
		for i, h := range hs {
			switch {
			case h == nil || !h.Healthy:
				last = fmt.Errorf("%s is not healthy", addrs[i])
			case hs[0] != nil && h.Leader != hs[0].Leader:
				last = fmt.Errorf("%s names leader %q, %s names %q", addrs[i], h.Leader, addrs[0], hs[0].Leader)
			}
		}
		if last == nil {
			answers := make([]answer, len(addrs))
			var wg sync.WaitGroup
			for i, addr := range addrs {
				wg.Go(func() {
					dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					idx, d, err := stateDigest(dctx, addr, wl)
					answers[i] = answer{idx, d, err}
				})
			}
			wg.Wait()
			same := true
			for i, a := range answers {
				switch {
				case a.err != nil:
					last, same = a.err, false
				case a.idx != answers[0].idx:
					last, same = fmt.Errorf("%s at index %d, %s at %d", addrs[i], a.idx, addrs[0], answers[0].idx), false
				case a.digest != answers[0].digest:
					last, same = fmt.Errorf("at index %d %s holds state %.12s, %s holds %.12s", a.idx, addrs[i], a.digest, addrs[0], answers[0].digest), false
				}
				if !same {
					break
				}
			}
			if same {
				return answers[0].idx, answers[0].digest, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, "", last
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkAcknowledgedHTTP checks that every acknowledged put is on every
// server, at its revision and with its value, reading each server's own
// replica. A revision the server no longer keeps (beyond its
// --history-limit) cannot be checked and is not a violation.
func checkAcknowledgedHTTP(ctx context.Context, addrs []string, wl *workload, ops []porcupine.Operation) (violations []string, unverified int) {
	var acked []porcupine.Operation
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Op == OpPut && !out.Unknown && !out.Conflict {
			acked = append(acked, op)
		}
	}
	results := make([][]string, len(addrs))
	unchecked := make([]int, len(addrs))
	var wg sync.WaitGroup
	for s, addr := range addrs {
		wg.Go(func() {
			cl := wl.apiClient(addr)
			cl.RetryNoLeader = 0
			var (
				mu                 sync.Mutex
				missing, compacted int
				out                []string
				readers            sync.WaitGroup
			)
			const parallel = 4
			for r := range parallel {
				readers.Go(func() {
					for k := r; k < len(acked); k += parallel {
						in, res := acked[k].Input.(Input), acked[k].Output.(Output)
						gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
						got, err := cl.GetIntent(gctx, in.Name, api.ReadOptions{Stale: true, Revision: res.Revision})
						cancel()
						var apiErr *api.Error
						mu.Lock()
						switch {
						case err == nil && got.Revision == res.Revision && content(got.Intent) == in.Value:
						case errors.As(err, &apiErr) && strings.Contains(apiErr.Message, "compacted"):
							compacted++
						default:
							missing++
							if missing <= 5 {
								detail := fmt.Sprint(err)
								if err == nil {
									detail = fmt.Sprintf("found revision %d = %q", got.Revision, content(got.Intent))
								}
								out = append(out, fmt.Sprintf("acknowledged write lost: %s has no %s=%q at revision %d (%s)", addr, in.Name, in.Value, res.Revision, detail))
							}
						}
						mu.Unlock()
					}
				})
			}
			readers.Wait()
			if missing > 5 {
				out = append(out, fmt.Sprintf("acknowledged writes lost on %s: %d of %d", addr, missing, len(acked)))
			}
			results[s], unchecked[s] = out, compacted
		})
	}
	wg.Wait()
	for s, r := range results {
		violations = append(violations, r...)
		unverified += unchecked[s]
	}
	return violations, unverified
}

// deploymentWatch samples, while faults run, every server's revision and
// every device's acknowledged revision on every server: on one server
// process neither may go backwards. A server the runner started again is a
// new process whose state is rebuilt from its data dir, so it is tracked
// afresh; samples taken while a fault is in force on it, or across a
// restart, are discarded.
type deploymentWatch struct {
	addrs  []string
	wl     *workload
	runner *hosts.Runner

	mu         sync.Mutex
	revs       map[int]watched            // guarded by mu; server -> its revision
	devices    map[int]map[string]watched // guarded by mu; server -> device -> acked revision
	violations []string                   // guarded by mu
	samples    int                        // guarded by mu
}

type watched struct {
	gen, rev uint64
}

func (w *deploymentWatch) run(ctx context.Context) {
	w.mu.Lock()
	w.revs, w.devices = map[int]watched{}, map[int]map[string]watched{}
	w.mu.Unlock()
	for tick := 0; ctx.Err() == nil; tick++ {
		var wg sync.WaitGroup
		for i := range w.addrs {
			wg.Go(func() { w.sample(ctx, i, tick%4 == 0) })
		}
		wg.Wait()
		sleep(ctx, 250*time.Millisecond)
	}
}

func (w *deploymentWatch) sample(ctx context.Context, i int, devices bool) {
	gen := w.runner.Generation(i)
	if w.runner.Unavailable(i) {
		return
	}
	cl := w.wl.apiClient(w.addrs[i])
	cl.RetryNoLeader = 0
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	h, _ := cl.Health(hctx)
	var list *api.DeviceList
	if devices {
		list, _ = cl.ListDevices(hctx, api.ReadOptions{Stale: true})
	}
	if w.runner.Unavailable(i) || w.runner.Generation(i) != gen {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if h != nil && h.Node != "" {
		prev, ok := w.revs[i]
		if ok && prev.gen == gen && h.Revision < prev.rev {
			w.violations = append(w.violations, fmt.Sprintf("revision went backwards on %s: %d after %d", h.Node, h.Revision, prev.rev))
		}
		if !ok || prev.gen != gen || h.Revision > prev.rev {
			w.revs[i] = watched{gen, h.Revision}
		}
		w.samples++
	}
	if list == nil {
		return
	}
	seen := w.devices[i]
	if seen == nil {
		seen = map[string]watched{}
		w.devices[i] = seen
	}
	for _, d := range list.Devices {
		prev, ok := seen[d.ID]
		if ok && prev.gen == gen && d.AckedRevision < prev.rev {
			w.violations = append(w.violations, fmt.Sprintf("device %s: acknowledged revision went backwards on %s: %d after %d", d.ID, w.addrs[i], d.AckedRevision, prev.rev))
		}
		if !ok || prev.gen != gen || d.AckedRevision > prev.rev {
			seen[d.ID] = watched{gen, d.AckedRevision}
		}
	}
	w.samples++
}

func (w *deploymentWatch) result() ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.violations...), w.samples
}

// checkDevices waits until every device the cluster knows is converged
// (its reported state matches its desired state and its owner committed
// the converged status), class by class (the value of the label named
// label), and checks that each class got there within its bound, counted
// from healed. It returns the number of devices and how long the last
// class took.
func checkDevices(ctx context.Context, addrs []string, wl *workload, healed time.Time, bounds map[string]time.Duration, label string, logger hclog.Logger) (int, time.Duration, []string) {
	boundOf := func(class string) (time.Duration, bool) {
		if b, ok := bounds[class]; ok {
			return b, true
		}
		b, ok := bounds["*"]
		return b, ok
	}
	var longest time.Duration
	for b := range maps.Values(bounds) {
		longest = max(longest, b)
	}
	done := map[string]time.Duration{} // class -> when all its devices were converged
	var list *api.DeviceList
	var lastErr error
	logged := -time.Hour
	for {
		list, lastErr = nil, errors.New("no leader")
		if l := leaderIndex(ctx, addrs, wl); l >= 0 {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			list, lastErr = wl.apiClient(addrs[l]).ListDevices(lctx, api.ReadOptions{})
			cancel()
		}
		if list != nil {
			classes, pending := map[string]bool{}, map[string]int{}
			for _, d := range list.Devices {
				class := d.Labels[label]
				if _, ok := boundOf(class); !ok {
					continue
				}
				classes[class] = true
				if !d.Converged || d.Status != "converged" {
					pending[class]++
				}
			}
			now := time.Since(healed)
			var statuses []string // a few of the devices not converged, for the log
			for _, d := range list.Devices {
				if _, ok := boundOf(d.Labels[label]); ok && (!d.Converged || d.Status != "converged") && len(statuses) < 3 {
					statuses = append(statuses, fmt.Sprintf("%s %s converged=%v desired=%d acked=%d server=%s reason=%q", d.ID, d.Status, d.Converged, d.DesiredRevision, d.AckedRevision, d.Server, d.StatusReason))
				}
			}
			if now-logged >= 5*time.Second {
				logger.Info("devices not converged yet", "pending", pending, "after", now.Round(time.Millisecond), "e.g.", strings.Join(statuses, "; "))
				logged = now
			}
			for class := range classes {
				if _, ok := done[class]; !ok && pending[class] == 0 {
					done[class] = now
				}
			}
			if len(classes) > 0 && len(done) == len(classes) {
				break
			}
		}
		if time.Since(healed) > longest || ctx.Err() != nil {
			break
		}
		sleep(ctx, 500*time.Millisecond)
	}
	if list == nil {
		return 0, 0, []string{fmt.Sprintf("devices: could not list them: %v", lastErr)}
	}
	var out []string
	checked := 0
	byClass := map[string][]api.DeviceSummary{}
	for _, d := range list.Devices {
		class := d.Labels[label]
		if _, ok := boundOf(class); ok {
			byClass[class] = append(byClass[class], d)
			checked++
		}
	}
	if checked == 0 {
		out = append(out, fmt.Sprintf("devices: none of the %d devices the cluster knows has a class with a bound (%v)", len(list.Devices), bounds))
	}
	var took time.Duration
	for class, ds := range byClass {
		bound, _ := boundOf(class)
		at, ok := done[class]
		took = max(took, at)
		if ok && at <= bound {
			continue
		}
		var late []string
		for _, d := range ds {
			if !d.Converged || d.Status != "converged" {
				late = append(late, fmt.Sprintf("%s (%s: %s)", d.ID, d.Status, d.StatusReason))
			}
		}
		if !ok {
			out = append(out, fmt.Sprintf("devices of class %q: %d of %d not converged %s after the faults were undone (bound %s), e.g. %s",
				class, len(late), len(ds), time.Since(healed).Round(time.Second), bound, strings.Join(late[:min(3, len(late))], ", ")))
		} else {
			out = append(out, fmt.Sprintf("devices of class %q converged %s after the faults were undone, bound %s", class, at.Round(time.Millisecond), bound))
		}
	}
	return checked, took, out
}
