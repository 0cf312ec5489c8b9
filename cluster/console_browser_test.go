package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/scheduler"
)

// TestConsoleInBrowser opens the web console in headless Chromium against
// a one-server cluster over TLS with the ACL on and ten simulated devices
// (fakeFleet: their sessions and reports go through the state machine, and
// the server's own status owner classifies them): eight take intent
// store-net, whose revision 2 has reached a pilot of two and waits for the
// approval of its second wave; two take us-logging, which one of them
// fails to apply. The console gets the admin token in the address's
// fragment. The test checks that the fleet's counts on the page are those
// of /v1/status, opens the failed device from its count and reads the
// server's reason on its page, approves the waiting wave by clicking, and
// sees the wave released. Screenshots of each step are test artifacts
// (go test -artifacts).
func TestConsoleInBrowser(t *testing.T) {
	browser := chromium(t)
	tok, err := acl.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	c := newTestCluster(t, 1, func(cfg *Config) {
		cfg.ClusterSecret = secret
		cfg.ACL = &ACLConfig{BootstrapTokenHash: acl.HashSecret(tok.Secret)}
		// The owner classifies the devices' reports within a moment.
		cfg.StatusEvalInterval = 100 * time.Millisecond
	})
	ac := &aclCluster{testCluster: c, admin: tok.Secret}
	ac.waitToken(tok.Secret)
	s := c.waitLeader()
	admin := tokenClient(s, tok.Secret)
	ctx := context.Background()

	f := &fakeFleet{t: t, s: s}
	var eu []string
	for i := range 8 {
		id := fmt.Sprintf("store-%d", i)
		eu = append(eu, id)
		f.add(id, map[string]string{"region": "eu"}, 0)
	}
	f.add("kiosk-1", map[string]string{"region": "us"}, 0)
	f.add("kiosk-2", map[string]string{"region": "us"}, 0)
	putYAML(t, admin, "store-net", netDoc("v1", ""))
	putYAML(t, admin, "us-logging", "name: us-logging\nselector: {region: us}\nresources:\n  - id: conf\n    type: file\n    spec: {path: /etc/pos/log.conf, content: v1}\n")
	for _, id := range append(eu, "kiosk-1") {
		f.converge(id)
	}
	const applyError = "open /etc/pos/log.conf: permission denied"
	f.failing("kiosk-2", applyError)

	// Revision 2 of store-net: a pilot of two, then the rest once approved.
	putYAML(t, admin, "store-net", netDoc("v2", "  waves:\n    - {name: pilot, count: 2}\n    - {name: rest, percent: 100, approval: true}\n"))
	pilot := map[string]bool{}
	waitFor(t, 10*time.Second, func() error {
		rels, err := s.State().Read().Releases("store-net")
		if err != nil || len(rels) != 2 {
			return fmt.Errorf("releases %v, %v", rels, err)
		}
		for _, r := range rels {
			f.converge(r.Device)
			pilot[r.Device] = true
		}
		return nil
	})
	var later string // a device the second wave will reach
	for _, id := range eu {
		if !pilot[id] {
			later = id
			break
		}
	}
	waitFor(t, 10*time.Second, func() error {
		if st := rolloutOf(t, admin, "store-net"); st.State != api.RolloutWaitingApproval {
			return fmt.Errorf("rollout %s (%s)", st.State, st.WaitingFor)
		}
		// Every device as its owner, this server, classified it.
		for _, id := range append(eu, "kiosk-1", "kiosk-2") {
			rec, err := s.State().Read().Device(nil, id)
			if err != nil || rec.StatusOwner != s.ID() {
				return fmt.Errorf("%s: status not committed by %s yet (%v)", id, s.ID(), err)
			}
		}
		return nil
	})
	status, err := admin.Status(ctx, api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{scheduler.StatusConverged: 9, scheduler.StatusFailed: 1}; !sameCounts(status.ByStatus, want) {
		t.Fatalf("the fleet before the browser looks: %v, want %v", status.ByStatus, want)
	}
	failed, err := admin.GetDevice(ctx, "kiosk-2", api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if failed.StatusReason == "" {
		t.Fatalf("kiosk-2 is %s with no reason", failed.Status)
	}

	// The console's files need no token; what they show does.
	if code, e, hdr := call(t, s, "", http.MethodGet, "/ui/", nil, nil); code != http.StatusOK || hdr.Get("Content-Security-Policy") == "" {
		t.Fatalf("GET /ui/ without a token: %d %s, CSP %q", code, e.Message, hdr.Get("Content-Security-Policy"))
	}
	if code, _, _ := call(t, s, "", http.MethodGet, "/v1/status", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("GET /v1/status without a token: %d, want 401", code)
	}

	b := startBrowser(t, browser, s.config.PeerTLS.Certificate.Certificate)
	b.do(chromedp.Navigate(s.HTTPURL() + "/#token=" + tok.Secret))

	// The fleet: the token is taken from the fragment and removed from the
	// address; the counts per status are /v1/status's.
	b.do(chromedp.WaitVisible(chromedp.CSS(`#status-cards .card[data-status="converged"]`)))
	if loc := b.eval(`location.href`); strings.Contains(loc, "token") || !strings.Contains(loc, "/ui/") {
		t.Errorf("the console's address is %s: want /ui/ and no token", loc)
	}
	want, _ := json.Marshal(status.ByStatus)
	b.poll(fmt.Sprintf(`(() => {
		const want = %s, got = {};
		for (const c of document.querySelectorAll('#status-cards .card')) got[c.dataset.status] = Number(c.querySelector('.count').textContent);
		return Object.keys(got).length === 12 && Object.entries(got).every(([k, v]) => v === (want[k] || 0));
	})()`, want), "the status counts of /v1/status")
	// The page stays current through the server's event stream.
	b.poll(`document.getElementById('live').dataset.mode === 'live'`, "the page on the event stream")
	b.screenshot("1-fleet")

	// The failed device, one click from its count, and why.
	b.do(chromedp.Click(chromedp.CSS(`#status-cards .card[data-status="failed"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#device-list tr[data-device="kiosk-2"] a`)))
	if n := b.eval(`String(document.querySelectorAll('#device-list tbody tr').length)`); n != "1" {
		t.Errorf("the failed devices' list has %s rows, want 1", n)
	}
	b.do(chromedp.Click(chromedp.CSS(`#device-list tr[data-device="kiosk-2"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`#why`)))
	reasonJSON, _ := json.Marshal(failed.StatusReason)
	b.poll(fmt.Sprintf(`(document.querySelector('#why .reason') || {}).textContent === %s`, reasonJSON), "the server's reason on the device page")
	why := b.eval(`document.getElementById('why').textContent`)
	for _, w := range []string{"Why it is not converged", "us-logging/conf", applyError} {
		if !strings.Contains(why, w) {
			t.Errorf("the device page's explanation lacks %q: %s", w, why)
		}
	}
	b.screenshot("2-failed-device")

	// The intent: approve the waiting wave by clicking.
	b.do(chromedp.Click(chromedp.CSS(`a[data-nav="fleet"]`)),
		chromedp.Click(chromedp.CSS(`#intents a[data-intent="store-net"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#waves tr[data-wave="2"] button[data-action="approve"]`)))
	ro := rolloutOf(t, admin, "store-net")
	if got := b.eval(`document.getElementById('rollout-waiting').textContent`); got != ro.WaitingFor {
		t.Errorf("the intent page says it waits for %q, the API %q", got, ro.WaitingFor)
	}
	if got := b.eval(`document.querySelector('#waves tr[data-wave="1"]').dataset.state`); got != scheduler.WaveDone {
		t.Errorf("wave 1 is %q on the page, want done", got)
	}
	b.screenshot("3-intent-waiting")

	// A device of the waiting wave says what it waits for.
	b.do(chromedp.Navigate(s.HTTPURL()+"/ui/#/device/"+later),
		chromedp.WaitVisible(chromedp.CSS(`#why .held li[data-intent="store-net"]`)))
	held := b.eval(`document.querySelector('#why .held li[data-intent="store-net"]').textContent`)
	for _, w := range []string{fmt.Sprintf("Revision %d of store-net is not released to this device yet", ro.Revision), "wave 2 (rest)", ro.WaitingFor} {
		if !strings.Contains(held, w) {
			t.Errorf("device %s, held back by the rollout, says %q: no %q", later, held, w)
		}
	}
	b.screenshot("3b-device-waiting")
	b.do(chromedp.NavigateBack(),
		chromedp.WaitVisible(chromedp.CSS(`#waves tr[data-wave="2"] button[data-action="approve"]`)))
	b.do(chromedp.Click(chromedp.CSS(`#waves tr[data-wave="2"] button[data-action="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#action-reason`)),
		chromedp.SendKeys(chromedp.CSS(`#action-reason`), "pilot stores checked"),
		chromedp.Click(chromedp.CSS(`#action-confirm`)))
	b.poll(`document.getElementById('modal').hidden || !document.getElementById('action-error').hidden`, "the answer to the approval")
	if msg := b.eval(`document.getElementById('modal').hidden ? '' : document.getElementById('action-error').textContent`); msg != "" {
		t.Fatalf("the page shows the approval refused: %s", msg)
	}
	b.poll(`(() => {
		const w = document.querySelector('#waves tr[data-wave="2"]');
		return w && w.dataset.state !== 'waiting-approval' && Number(w.querySelector('.wave-released').textContent) > 0;
	})()`, "wave 2 released on the page")
	ro = rolloutOf(t, admin, "store-net")
	if len(ro.Waves) != 2 || ro.Waves[1].Released == 0 || ro.Waves[1].ApprovedBy == "" {
		t.Fatalf("after the click the API has the rollout %s with waves %+v", ro.State, ro.Waves)
	}
	if got := b.eval(`document.querySelector('#waves tr[data-wave="2"] .wave-approval').textContent`); !strings.Contains(got, "approved by "+ro.Waves[1].ApprovedBy) {
		t.Errorf("wave 2's approval on the page: %q, the API's: approved by %q", got, ro.Waves[1].ApprovedBy)
	}
	events, err := admin.RolloutEvents(ctx, "store-net", api.ReadOptions{Revision: ro.Revision})
	if err != nil {
		t.Fatal(err)
	}
	approved := false
	for _, e := range events.Events {
		approved = approved || e.Kind == "approved" && e.Wave == 2 && e.Actor == ro.Waves[1].ApprovedBy && strings.HasSuffix(e.Message, ": pilot stores checked")
	}
	if !approved {
		t.Errorf("no approval of wave 2 by the console's token, with its reason, on the rollout's timeline: %+v", events.Events)
	}
	b.screenshot("4-wave-released")

	// The cluster page.
	b.do(chromedp.Click(chromedp.CSS(`a[data-nav="cluster"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#members tr[data-member="`+s.ID()+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#ownership`)))
	b.screenshot("5-cluster")
}

// failing has device id acknowledge the cluster's revision and report
// every resource of its desired state failed with the error lastError.
func (f *fakeFleet) failing(id, lastError string) {
	f.report(id, scheduler.StatusFailed, func(r *scheduler.Resource) fsm.ResourceStatus {
		return fsm.ResourceStatus{Key: r.Key, Effective: "unknown", State: "failed", LastError: lastError, Attempts: 3}
	})
}

func sameCounts(got, want map[string]int) bool {
	for k, v := range got {
		if want[k] != v {
			return false
		}
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// browserTab is a tab of a headless Chromium the test drives.
type browserTab struct {
	t   *testing.T
	ctx context.Context
	dir string // screenshots

	mu     sync.Mutex
	errors []string // guarded by mu: what the page reported as errors
}

// startBrowser starts headless Chromium with a throwaway profile. It
// trusts the test server's certificate chain (DER, leaf first) by the
// hashes of its public keys (--ignore-certificate-errors-spki-list, which
// Chromium honours only with a --user-data-dir): the pages are served over
// the server's real TLS, and no other certificate error is ignored.
func startBrowser(t *testing.T, path string, chain [][]byte) *browserTab {
	t.Helper()
	var pins []string
	for _, der := range chain {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		pins = append(pins, base64.StdEncoding.EncodeToString(sum[:]))
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
		chromedp.Flag("ignore-certificate-errors-spki-list", strings.Join(pins, ",")),
	)
	if os.Geteuid() == 0 {
		// Chromium's sandbox refuses to run as root.
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	b := &browserTab{t: t, ctx: ctx, dir: t.ArtifactDir()}
	msgs := chromedp.Console(ctx)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancelTab()
		cancelAlloc()
		t.Fatalf("start %s: %v", path, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.record(m)
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			b.screenshot("failed")
		}
		cancelTab()
		cancelAlloc()
		<-done
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.errors {
			t.Errorf("the page reported: %s", e)
		}
	})
	return b
}

// record keeps what the console shows as an error: an exception, a
// console.error, a refused script or style (the Content-Security-Policy).
// A failed request is only logged: the console's requests to
// /v1/events answer 404 on servers without the event stream.
func (b *browserTab) record(m chromedp.ConsoleMessage) {
	switch {
	case m.Source == "network":
		b.t.Logf("browser: %s %s", m.Text, m.URL)
	case m.IsException(), m.Type == chromedp.ConsoleError:
		b.mu.Lock()
		b.errors = append(b.errors, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
		b.mu.Unlock()
	}
}

func (b *browserTab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

func (b *browserTab) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// poll waits until the page makes expr true, as the page changes.
func (b *browserTab) poll(expr, what string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		b.t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (b *browserTab) screenshot(name string) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644)
	}
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
	}
}

// chromium returns the path of Debian's chromium, installing it with
// apt-get when it is missing; the test is skipped when it is missing and
// cannot be installed here.
func chromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	apt, err := exec.LookPath("apt-get")
	switch {
	case err != nil:
		t.Skip("chromium is not installed and there is no apt-get to install it: install Chromium to run the console's browser test")
	case os.Geteuid() != 0:
		t.Skip("chromium is not installed and this user cannot install it (not root): run 'apt-get install chromium' to run the console's browser test")
	}
	install := func() ([]byte, error) {
		cmd := exec.Command(apt, "install", "-y", "--no-install-recommends", "chromium")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	t.Log("chromium is not installed: apt-get install chromium")
	if out, err := install(); err != nil {
		// The package lists may be missing (a fresh container).
		if upd, uerr := exec.Command(apt, "update").CombinedOutput(); uerr != nil {
			t.Skipf("chromium is not installed and apt-get cannot install it: %v\n%s\n%s", uerr, out, upd)
		}
		if out, err := install(); err != nil {
			t.Skipf("chromium is not installed and apt-get cannot install it: %v\n%s", err, out)
		}
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Skipf("apt-get installed chromium, but it is not on PATH: %v", err)
	}
	return p
}
