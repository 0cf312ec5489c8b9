package scheduler

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meteor-edge/meteor/fsm"
)

// TestRotationDeadline follows a certificate rotation (window from hour 6,
// deadline at hour 14) on a device behind a lossy link whose sessions
// drop for two hours at a time, on the fake clock of a synctest bubble,
// its sessions recorded by a real state machine (which keeps the link
// history): before its window opens the resource is neither late nor
// stuck; while the device is connected, or offline for less than its gaps
// last, the deadline is not at risk; offline past every gap it had, it is
// at risk hours before the deadline; once the deadline passes unapplied
// it is missed; and once applied it is met.
func TestRotationDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, err := fsm.New(fsm.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		// The cluster runs this release's level: link history is kept.
		index := uint64(1)
		raise, err := fsm.Encode(fsm.SetFeatureLevelType, &fsm.SetFeatureLevelRequest{Level: fsm.FeatureLevel})
		if err != nil {
			t.Fatal(err)
		}
		if res := f.Apply(index, raise); res.Err != nil {
			t.Fatal(res.Err)
		}
		session := func(connected bool) {
			t.Helper()
			index++
			cmd, err := fsm.Encode(fsm.DeviceSessionType, &fsm.DeviceSessionRequest{
				ID: "kiosk-7", SessionID: "s", Server: "s1", Conn: "c", Connected: connected, AckedRevision: 1, Time: time.Now().UnixNano(),
			})
			if err != nil {
				t.Fatal(err)
			}
			if res := f.Apply(index, cmd); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		const cert = "pos/tls"
		start := time.Now()
		in := map[string]Intended{cert: {Class: "certificate", NotBefore: start.Add(6 * time.Hour), Deadline: start.Add(14 * time.Hour)}}
		d := desiredAt(1, cert)
		var mark ProgressMark
		reported := notApplied(cert)
		step := func(want string) DeviceStatus {
			t.Helper()
			rec, err := f.Read().Device(nil, "kiosk-7")
			if err != nil {
				t.Fatal(err)
			}
			rec.Resources = []fsm.ResourceStatus{reported}
			v := Compare(d, rec)
			mark = NextProgressMark(mark, v, rec, time.Now())
			got := Classify(v, rec, nil, in, time.Now(), mark)
			if got.Status != want {
				t.Fatalf("after %v: %s (%s), want %s", time.Since(start), got.Status, got.Reason, want)
			}
			return got
		}

		// Its link: two hours offline, then connected, twice.
		session(true)
		for range 2 {
			time.Sleep(30 * time.Minute)
			session(false)
			time.Sleep(2 * time.Hour)
			session(true)
		}
		time.Sleep(time.Minute)
		// Connected before its window opens: waiting, not stuck (the
		// certificate class's progress deadline is 30m).
		got := step(StatusProgressing)
		if !strings.Contains(got.Reason, "its rotation window opens at") {
			t.Errorf("reason %q does not say the window is not open", got.Reason)
		}
		if rec, _ := f.Read().Device(nil, "kiosk-7"); len(rec.Link.Gaps) != 2 || rec.Link.LongestGap() != 2*time.Hour {
			t.Fatalf("link history %+v", rec.Link)
		}
		time.Sleep(2 * time.Hour) // hour 7: the window is open; connected, a pull away
		step(StatusStuck)         // but no progress for 2h
		session(false)
		time.Sleep(90 * time.Minute) // offline for less than its gaps last
		step(StatusUnreachable)
		time.Sleep(time.Hour) // offline longer than any gap: 2h30m, as long again
		got = step(StatusDeadlineAtRisk)
		if want := "pos/tls: rotation deadline " + start.Add(14*time.Hour).Format(time.RFC3339) + " at risk (4h29m left): expected applied in about 3h (offline for 2h30m, longer than any recent gap; then a pull (30m))"; !strings.HasPrefix(got.Reason, want) {
			t.Errorf("reason\n%s\nwant it to start with\n%s", got.Reason, want)
		}
		time.Sleep(4*time.Hour + 30*time.Minute) // past the deadline
		got = step(StatusDeadlineMissed)
		if !strings.Contains(got.Reason, "missed 1m ago") {
			t.Errorf("reason %q", got.Reason)
		}
		session(true) // back; applied late
		reported = converged(cert)
		step(StatusConverged)
	})
}
