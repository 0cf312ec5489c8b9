package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != 10*time.Minute || strings.Join(c.profiles, ",") != "fiber,cellular" || c.pushes != 5 || c.agentBin != "" {
		t.Errorf("defaults: duration %v, profiles %v, pushes %d, agent-bin %q", c.duration, c.profiles, c.pushes, c.agentBin)
	}
	c, err = parseFlags([]string{"-duration", "2m", "-profiles", "cellular", "-agent-bin", "bin/meteor-agent"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != 2*time.Minute || strings.Join(c.profiles, ",") != "cellular" || !filepath.IsAbs(c.agentBin) {
		t.Errorf("duration %v, profiles %v, agent-bin %q", c.duration, c.profiles, c.agentBin)
	}
	for _, bad := range [][]string{{"-profiles", "satellite"}, {"-duration", "1s"}, {"-pushes", "0"}, {"stray"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

func TestLinkProfiles(t *testing.T) {
	for _, name := range []string{linkFiber, linkCellular} {
		p, err := linkProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Delay == 0 {
			t.Errorf("%s: no delay", name)
		}
	}
	if p, _ := linkProfile(linkCellular); p.Loss == 0 {
		t.Error("cellular without loss")
	}
	if _, err := linkProfile("lan"); err == nil {
		t.Error("unknown profile: no error")
	}
}

func TestIntentSelectsTheDeviceAndChangesOneResource(t *testing.T) {
	var docs []*intent.Intent
	for v := 1; v <= 2; v++ {
		b, err := intentDoc(v)
		if err != nil {
			t.Fatal(err)
		}
		in, err := intent.Parse(b)
		if err != nil {
			t.Fatalf("version %d: %v\n%s", v, err, b)
		}
		if !in.Matches(deviceLabels()) || len(in.Resources) != len(resourceIDs) {
			t.Errorf("version %d: matches %v, %d resources", v, in.Matches(deviceLabels()), len(in.Resources))
		}
		docs = append(docs, in)
	}
	for i, r := range docs[0].Resources {
		changed := r.Spec["content"] != docs[1].Resources[i].Spec["content"]
		if changed != (r.ID == pushedID) {
			t.Errorf("resource %s: changed %v between versions", r.ID, changed)
		}
	}
}

func TestPerDay(t *testing.T) {
	for _, tc := range []struct {
		n      uint64
		window time.Duration
		want   float64
	}{{1000, 10 * time.Minute, 144_000}, {500, 2 * time.Minute, 360_000}, {7, day, 7}, {10, 0, 0}} {
		if got := perDay(tc.n, tc.window); got != tc.want {
			t.Errorf("perDay(%d, %v) = %v, want %v", tc.n, tc.window, got, tc.want)
		}
	}
	tr := traffic{UpPackets: 2, UpBytes: 100, DownPackets: 1, DownBytes: 50}
	if got := tr.ipBytes(); got != 150+3*28 {
		t.Errorf("ipBytes = %d", got)
	}
	if got := tr.add(tr).sub(tr); got != tr {
		t.Errorf("add then sub = %+v", got)
	}
	if got := cpuPercent(600*time.Millisecond, 10*time.Minute); got != 0.1 {
		t.Errorf("cpuPercent = %v, want 0.1", got)
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\tmeteor\nVmPeak:\t 1300000 kB\nVmHWM:\t   18000 kB\nVmRSS:\t   15360 kB\nThreads:\t9\n"
	m, err := parseStatus([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 15<<20 || m.HWM != 18000<<10 {
		t.Errorf("parseStatus = %+v", m)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\nVmHWM:\t1 kB\n", "VmRSS:\tx kB\nVmHWM:\t1 kB\n"} {
		if _, err := parseStatus([]byte(bad)); err == nil {
			t.Errorf("parseStatus(%q): no error", bad)
		}
	}
	if _, err := os.Stat("/proc/self/status"); err == nil {
		m, err := readMemory(os.Getpid())
		if err != nil || m.RSS == 0 || m.HWM < m.RSS {
			t.Errorf("readMemory(self) = %+v, %v", m, err)
		}
	}
}

// writeELF writes a minimal 64-bit ELF executable with one PT_LOAD and,
// if interp is not empty, a PT_INTERP naming it.
func writeELF(t *testing.T, interp string) string {
	t.Helper()
	progs := []elf.Prog64{{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Align: 0x1000}}
	const hdr, phsize = 64, 56
	if interp != "" {
		n := len(progs) + 1
		off := uint64(hdr + n*phsize)
		progs = append(progs, elf.Prog64{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R), Off: off, Filesz: uint64(len(interp) + 1), Memsz: uint64(len(interp) + 1), Align: 1})
	}
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Phoff: hdr, Ehsize: hdr, Phentsize: phsize, Phnum: uint16(len(progs))}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, h)
	binary.Write(&b, binary.LittleEndian, progs)
	if interp != "" {
		b.WriteString(interp + "\x00")
	}
	path := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStaticCheck(t *testing.T) {
	static, err := inspectBinary(writeELF(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if !static.Static || static.Interpreter != "" || static.Bytes != 64+56 {
		t.Errorf("no PT_INTERP: %+v", static)
	}
	dyn, err := inspectBinary(writeELF(t, "/lib64/ld-linux-x86-64.so.2"))
	if err != nil {
		t.Fatal(err)
	}
	if dyn.Static || dyn.Interpreter != "/lib64/ld-linux-x86-64.so.2" {
		t.Errorf("with PT_INTERP: %+v", dyn)
	}
	notELF := filepath.Join(t.TempDir(), "script")
	os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)
	if _, err := inspectBinary(notELF); err == nil {
		t.Error("a shell script: no error")
	}
}

func TestParseCounters(t *testing.T) {
	out := `table inet meteorbench_footprint_42 {
	chain input {
		type filter hook input priority -10; policy accept;
		iif "lo" udp dport 40001 counter packets 12 bytes 3400 comment "up0"
		iif "lo" udp sport 40001 counter packets 10 bytes 2000 comment "down0"
		iif "lo" udp dport 40002 counter packets 3 bytes 900 comment "up1"
		iif "lo" udp sport 40002 counter packets 2 bytes 700 comment "down1"
	}
}`
	got, err := parseCounters(out, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := (nftCount{12, 3400, 10, 2000}); got[0] != want {
		t.Errorf("port 0: %+v, want %+v", got[0], want)
	}
	if want := (nftCount{3, 900, 2, 700}); got[1] != want {
		t.Errorf("port 1: %+v, want %+v", got[1], want)
	}
	if _, err := parseCounters(out, 3); err == nil {
		t.Error("a missing port: no error")
	}
	if _, err := parseCounters(out, 1); err == nil {
		t.Error("an unexpected port: no error")
	}
}

func TestSummaryRows(t *testing.T) {
	rep := &report{
		Params: paramInfo{DurationSec: 600},
		Binary: binaryInfo{Path: "bin/meteor", Bytes: 21_000_000, Interpreter: "/lib64/ld-linux-x86-64.so.2"},
		Profiles: []*profileResult{
			{Profile: "fiber", Server: "meteor-1", ServerEnd: "meteor-1", IPBytesPerDay: 150_000, DayBytes: 150_000, PushP50MS: 20, PushMaxMS: 40, RSSBytes: 14 << 20, CPUPercent: 0.05},
			{Profile: "cellular", Server: "meteor-2", ServerEnd: "meteor-2", IPBytesPerDay: 190_000, DayBytes: 190_000, PushP50MS: 400, PushMaxMS: 1200, RSSBytes: 16 << 20, CPUPercent: 0.08, Elections: 1},
		},
	}
	rows := summaryRows(rep)
	if len(rows) != 7 {
		t.Fatalf("%d rows, want 7 (traffic and push per profile, RSS, CPU, binary)", len(rows))
	}
	met := func(i int) bool { return *rows[i].Met }
	want := []bool{true, true, false, false, false, true, false}
	for i, w := range want {
		if rows[i].Bench != benchRow || rows[i].Goal == "" || rows[i].Met == nil {
			t.Fatalf("row %d: %+v", i, rows[i])
		}
		if met(i) != w {
			t.Errorf("row %d (%s, %s): met %v, want %v", i, rows[i].Figure, rows[i].Meteor, met(i), w)
		}
	}
	if !strings.Contains(rows[4].Meteor, "cellular") || *rows[4].Elections != 1 {
		t.Errorf("RSS row is not the cellular profile's: %+v", rows[4])
	}
	rep.Binary = binaryInfo{Path: "bin/meteor-agent", Bytes: 11_000_000, Static: true}
	rep.Summary = summaryRows(rep)
	if !*rep.Summary[6].Met {
		t.Errorf("a static 11 MB binary: %+v", rep.Summary[6])
	}
	md := markdown(rep)
	if !strings.Contains(md, "| agent binary | 11.0 MB, static | ≤ 12 MB, static | yes |") {
		t.Errorf("markdown:\n%s", md)
	}
}
