package benchkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// UDP socket buffers and the datagrams dropped by full ones.
//
// quic-go asks for 7 MiB of receive and send buffer on every UDP socket it
// is given (its wiki, "UDP Buffer Sizes"), and Linux silently caps a
// request at net.core.rmem_max (wmem_max for sending): 4 MiB on the
// reference machine, so every socket of a run got 4 MiB, and quic-go,
// which compares its request with the doubled figure Linux reports, did
// not warn. The wiki's remedy is the host limit: sysctl -w
// net.core.rmem_max=7500000 (and wmem_max). RaiseUDPBufferMax does that
// for a run when it is root and puts the old limits back at the end;
// ReadUDPBuffers shows what each socket really got, and a UDPWatch counts
// the datagrams the kernel dropped on the run's sockets and on the host.

// UDPBufferMax is the limit quic-go's wiki recommends for
// net.core.rmem_max and wmem_max: enough for its 7 MiB request.
const UDPBufferMax = 7_500_000

// quicBufferRequest is what quic-go asks for on every socket.
const quicBufferRequest = 7 << 20

// The sysctl files of the host's buffer limits.
const (
	rmemMaxFile = "/proc/sys/net/core/rmem_max"
	wmemMaxFile = "/proc/sys/net/core/wmem_max"
)

// UDPBufferLimits are the host's limits, in bytes, -1 where unknown.
type UDPBufferLimits struct {
	RmemMax int `json:"rmem_max"`
	WmemMax int `json:"wmem_max"`
}

// ReadUDPBufferLimits reads net.core.rmem_max and wmem_max.
func ReadUDPBufferLimits() UDPBufferLimits {
	return UDPBufferLimits{RmemMax: readSysctlInt(rmemMaxFile), WmemMax: readSysctlInt(wmemMaxFile)}
}

func readSysctlInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// UDPBufferSetup is what a run did about the host's buffer limits, for
// its results file.
type UDPBufferSetup struct {
	// Before are the limits found, During those the run ran with.
	Before UDPBufferLimits `json:"before"`
	During UDPBufferLimits `json:"during"`
	// Raised says the run raised them (and put Before back at its end).
	Raised bool `json:"raised"`
	// Note says what was done or why not, for the results' notes.
	Note string `json:"note"`
}

// RaiseUDPBufferMax raises net.core.rmem_max and wmem_max to UDPBufferMax
// where they are lower, if raise is set and this process is root, so that
// every socket of the run gets the buffers quic-go asks for. restore puts
// the old values back; call it when the run ends (a run killed outright
// leaves the raised limits, which only allow larger buffers). The limits
// are the whole host's (its network namespace): a run beside others
// raises them for the others too.
func RaiseUDPBufferMax(raise bool) (setup UDPBufferSetup, restore func() error) {
	setup.Before = ReadUDPBufferLimits()
	setup.During = setup.Before
	restore = func() error { return nil }
	low := setup.Before.RmemMax < UDPBufferMax || setup.Before.WmemMax < UDPBufferMax
	switch {
	case !low:
		setup.Note = fmt.Sprintf("net.core.rmem_max %d and wmem_max %d already allow the 7 MiB quic-go asks for", setup.Before.RmemMax, setup.Before.WmemMax)
		return setup, restore
	case !raise:
		setup.Note = fmt.Sprintf("net.core.rmem_max %d and wmem_max %d left as they were (-raise-udp-buffers=false): sockets get at most those, below the 7 MiB quic-go asks for", setup.Before.RmemMax, setup.Before.WmemMax)
		return setup, restore
	case os.Geteuid() != 0:
		setup.Note = fmt.Sprintf("net.core.rmem_max %d and wmem_max %d are below quic-go's recommended %d and this is not root: sockets get at most those (as root the benchmark raises them for the run)", setup.Before.RmemMax, setup.Before.WmemMax, UDPBufferMax)
		return setup, restore
	}
	var written []string
	var errs []error
	for _, f := range []struct {
		path string
		was  int
	}{{rmemMaxFile, setup.Before.RmemMax}, {wmemMaxFile, setup.Before.WmemMax}} {
		if f.was >= UDPBufferMax {
			continue
		}
		if err := os.WriteFile(f.path, []byte(strconv.Itoa(UDPBufferMax)), 0o644); err != nil {
			errs = append(errs, err)
			continue
		}
		written = append(written, f.path)
	}
	setup.During = ReadUDPBufferLimits()
	setup.Raised = len(written) > 0
	restore = func() error {
		var errs []error
		for _, path := range written {
			was := setup.Before.RmemMax
			if path == wmemMaxFile {
				was = setup.Before.WmemMax
			}
			if err := os.WriteFile(path, []byte(strconv.Itoa(was)), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restore %s to %d: %w", path, was, err))
			}
		}
		return errors.Join(errs...)
	}
	if err := errors.Join(errs...); err != nil {
		setup.Note = fmt.Sprintf("raising net.core.rmem_max and wmem_max to %d failed (%v): the run has %d and %d", UDPBufferMax, err, setup.During.RmemMax, setup.During.WmemMax)
		return setup, restore
	}
	setup.Note = fmt.Sprintf("net.core.rmem_max and wmem_max raised from %d and %d to %d for the run (root; the sysctl quic-go's wiki recommends), and put back at its end",
		setup.Before.RmemMax, setup.Before.WmemMax, UDPBufferMax)
	return setup, restore
}

// UDPBuffers are one socket's buffer sizes as the kernel reports them
// (SO_RCVBUF, SO_SNDBUF: Linux reports twice what it grants, the other
// half being its bookkeeping).
type UDPBuffers struct {
	Rcv int `json:"rcvbuf"`
	Snd int `json:"sndbuf"`
}

// Granted says whether the buffers hold quic-go's 7 MiB request, judged
// as quic-go judges it on Linux: granted = reported / 2.
func (b UDPBuffers) Granted() bool {
	return b.Rcv/2 >= quicBufferRequest && b.Snd/2 >= quicBufferRequest
}

// ReadUDPBuffers returns the buffers of the UDP sockets bound to ports on
// this host, from `ss -Huamn`.
func ReadUDPBuffers(ctx context.Context, ports []int) (map[int]UDPBuffers, error) {
	out, err := exec.CommandContext(ctx, "ss", "-Huamn").Output()
	if err != nil {
		return nil, fmt.Errorf("ss -Huamn (iproute2) to read socket buffers: %w", err)
	}
	return parseSSBuffers(out, ports), nil
}

var (
	ssLocalPort = regexp.MustCompile(`^\S+\s+\d+\s+\d+\s+\S*:(\d+)\s`)
	ssSkmem     = regexp.MustCompile(`skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)`)
)

// parseSSBuffers reads `ss -Huamn`: a socket's line (state, queues, local
// and peer address) followed by its skmem line.
func parseSSBuffers(text []byte, ports []int) map[int]UDPBuffers {
	want := map[int]bool{}
	for _, p := range ports {
		want[p] = true
	}
	out := map[int]UDPBuffers{}
	port := -1
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if m := ssLocalPort.FindStringSubmatch(line); m != nil {
			port, _ = strconv.Atoi(m[1])
		}
		if m := ssSkmem.FindStringSubmatch(line); m != nil && want[port] {
			rb, _ := strconv.Atoi(m[1])
			tb, _ := strconv.Atoi(m[2])
			out[port] = UDPBuffers{Rcv: rb, Snd: tb}
			port = -1
		}
	}
	return out
}

// BufferSummary describes the buffers of a group of sockets: "7.0 MiB
// (granted) on 3 sockets", or the smallest and largest.
func BufferSummary(bufs map[int]UDPBuffers, ports []int) string {
	lo, hi := UDPBuffers{Rcv: -1}, UDPBuffers{}
	n := 0
	for _, p := range ports {
		b, ok := bufs[p]
		if !ok {
			continue
		}
		n++
		if lo.Rcv < 0 || b.Rcv < lo.Rcv {
			lo = b
		}
		if b.Rcv > hi.Rcv {
			hi = b
		}
	}
	if n == 0 {
		return "unknown"
	}
	mib := func(b UDPBuffers) string {
		return fmt.Sprintf("%.1f MiB receive / %.1f MiB send", float64(b.Rcv/2)/(1<<20), float64(b.Snd/2)/(1<<20))
	}
	if lo == hi {
		return fmt.Sprintf("%s on %d sockets", mib(lo), n)
	}
	return fmt.Sprintf("%s to %s on %d sockets", mib(lo), mib(hi), n)
}

// ReadUDPDrops returns, for each local port in ports, the datagrams the
// kernel dropped on the UDP sockets bound to it (/proc/net/udp and udp6,
// last column): nearly all for a full receive buffer. A socket's count
// goes with it when it closes.
func ReadUDPDrops(ports []int) (map[int]uint64, error) {
	out := map[int]uint64{}
	for _, f := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) && f == "/proc/net/udp6" {
			continue
		}
		if err != nil {
			return nil, err
		}
		m, err := ParseUDPDrops(b, ports)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for p, n := range m {
			out[p] += n
		}
	}
	return out, nil
}

// ParseUDPDrops parses /proc/net/udp's text: a header line, then one line
// per socket with the local address as hex "IP:PORT" in the second field
// and the drop count in the last.
func ParseUDPDrops(text []byte, ports []int) (map[int]uint64, error) {
	want := make(map[int]bool, len(ports))
	for _, p := range ports {
		want[p] = true
	}
	out := make(map[int]uint64, len(ports))
	sc := bufio.NewScanner(bytes.NewReader(text))
	header := true
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if header {
			if len(f) == 0 || f[len(f)-1] != "drops" {
				return nil, fmt.Errorf("unexpected header %q", sc.Text())
			}
			header = false
			continue
		}
		if len(f) < 3 {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || !want[int(port)] {
			continue
		}
		drops, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("drops of port %d: %w", port, err)
		}
		out[int(port)] += drops
	}
	return out, sc.Err()
}

// SumDrops adds up the drops of ports between two readings.
func SumDrops(before, after map[int]uint64, ports []int) int64 {
	var n int64
	for _, p := range ports {
		n += int64(after[p] - before[p])
	}
	return n
}

// UDPStats are the host's UDP counters (/proc/net/snmp, line "Udp:"), for
// its whole network namespace: every process on it, not only the run's.
type UDPStats struct {
	InDatagrams  uint64 `json:"in_datagrams"`
	RcvbufErrors uint64 `json:"rcvbuf_errors"`
	SndbufErrors uint64 `json:"sndbuf_errors"`
}

// ReadUDPStats reads /proc/net/snmp.
func ReadUDPStats() (UDPStats, error) {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return UDPStats{}, err
	}
	return ParseUDPStats(b)
}

// ParseUDPStats reads the "Udp:" header and value lines of
// /proc/net/snmp's text.
func ParseUDPStats(text []byte) (UDPStats, error) {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		if len(f)-1 != len(names) {
			return UDPStats{}, fmt.Errorf("/proc/net/snmp: %d Udp values for %d names", len(f)-1, len(names))
		}
		var s UDPStats
		found := 0
		for i, name := range names {
			var dst *uint64
			switch name {
			case "InDatagrams":
				dst = &s.InDatagrams
			case "RcvbufErrors":
				dst = &s.RcvbufErrors
			case "SndbufErrors":
				dst = &s.SndbufErrors
			default:
				continue
			}
			v, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return UDPStats{}, fmt.Errorf("/proc/net/snmp Udp %s: %w", name, err)
			}
			*dst = v
			found++
		}
		if found != 3 {
			return UDPStats{}, errors.New("/proc/net/snmp: Udp lacks InDatagrams, RcvbufErrors or SndbufErrors")
		}
		return s, nil
	}
	if err := sc.Err(); err != nil {
		return UDPStats{}, err
	}
	return UDPStats{}, errors.New("/proc/net/snmp: no Udp lines")
}

// UDPDrops are the datagrams dropped during one measured period.
type UDPDrops struct {
	// Servers and Devices are the drops on the servers' agent sockets and
	// on the devices' sockets (their receive buffers were full); -1 where
	// they could not be read.
	Servers int64 `json:"server_socket_drops"`
	Devices int64 `json:"device_socket_drops"`
	// HostRcvbuf and HostSndbuf are the host's UDP RcvbufErrors and
	// SndbufErrors over the period: the run's sockets and any other
	// process's on the host; -1 where unknown.
	HostRcvbuf int64 `json:"host_rcvbuf_errors"`
	HostSndbuf int64 `json:"host_sndbuf_errors"`
	// HostDatagrams is the host's UDP datagrams received over the period.
	HostDatagrams int64 `json:"host_datagrams_received"`
}

// String describes the drops in a few words.
func (d UDPDrops) String() string {
	count := func(n int64) string {
		if n < 0 {
			return "unknown"
		}
		return strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("datagrams dropped by full receive buffers: %s on the servers' agent sockets, %s on the devices' (host-wide RcvbufErrors %s of %s received, SndbufErrors %s)",
		count(d.Servers), count(d.Devices), count(d.HostRcvbuf), count(d.HostDatagrams), count(d.HostSndbuf))
}

// UDPWatch counts the drops of a period: start it with WatchUDP, read it
// with Drops (before the sockets close).
type UDPWatch struct {
	servers, devices []int
	drops0           map[int]uint64
	dropsErr         error
	snmp0            UDPStats
	snmpErr          error
}

// WatchUDP starts counting drops on the server and device ports given.
func WatchUDP(servers, devices []int) *UDPWatch {
	w := &UDPWatch{servers: servers, devices: devices}
	w.drops0, w.dropsErr = ReadUDPDrops(append(append([]int(nil), servers...), devices...))
	w.snmp0, w.snmpErr = ReadUDPStats()
	return w
}

// Drops returns the drops since WatchUDP.
func (w *UDPWatch) Drops() UDPDrops {
	d := UDPDrops{Servers: -1, Devices: -1, HostRcvbuf: -1, HostSndbuf: -1, HostDatagrams: -1}
	if w.dropsErr == nil {
		if now, err := ReadUDPDrops(append(append([]int(nil), w.servers...), w.devices...)); err == nil {
			d.Servers, d.Devices = SumDrops(w.drops0, now, w.servers), SumDrops(w.drops0, now, w.devices)
		}
	}
	if w.snmpErr == nil {
		if now, err := ReadUDPStats(); err == nil {
			d.HostRcvbuf = int64(now.RcvbufErrors - w.snmp0.RcvbufErrors)
			d.HostSndbuf = int64(now.SndbufErrors - w.snmp0.SndbufErrors)
			d.HostDatagrams = int64(now.InDatagrams - w.snmp0.InDatagrams)
		}
	}
	return d
}
