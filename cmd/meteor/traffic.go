package main

import (
	"fmt"
	"io"

	"github.com/meteor-edge/meteor/cluster/api"
)

// byteSize says a byte count for people, in decimal units: 512 B, 41.2 KB,
// 3.4 MB.
func byteSize(n uint64) string {
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"KB", "MB", "GB", "TB"} {
		v /= 1000
		if v < 999.95 || unit == "TB" {
			return fmt.Sprintf("%.1f %s", v, unit)
		}
	}
	return "" // not reached
}

// trafficCounts says "41.2 KB (up 23.0 KB, down 18.2 KB)".
func trafficCounts(c api.TrafficCounts) string {
	return fmt.Sprintf("%s (up %s, down %s)", byteSize(c.Bytes()), byteSize(c.SentBytes), byteSize(c.RecvBytes))
}

// trafficSummary is a device's Traffic line: the day's total, how many
// servers it went to, the day before's total, and when it was reported.
func trafficSummary(t *api.DeviceTraffic) string {
	if t == nil {
		return "not reported (agents report their own traffic from protocol 1.3 on)"
	}
	s := fmt.Sprintf("today %s over %s; yesterday %s", trafficCounts(t.Today), plural(uint64(len(t.Servers)), "server", "servers"), byteSize(t.Previous.Bytes()))
	return s + fmt.Sprintf("  (UTC day %s, reported %s)", t.Day, ago(t.AsOf))
}

// printTrafficServers prints a device's traffic of the day per server.
func printTrafficServers(w io.Writer, t *api.DeviceTraffic) {
	if t == nil || len(t.Servers) == 0 {
		return
	}
	tw := table(w)
	fmt.Fprintln(tw, "  SERVER\tTODAY\tUP\tDOWN\tDATAGRAMS UP/DOWN")
	for _, s := range t.Servers {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d/%d\n", s.Server, byteSize(s.Bytes()), byteSize(s.SentBytes), byteSize(s.RecvBytes), s.SentPackets, s.RecvPackets)
	}
	tw.Flush()
}

// trafficCell is a device's TRAFFIC in a listing sorted by traffic.
func trafficCell(c *api.TrafficCounts) string {
	if c == nil {
		return "-"
	}
	return byteSize(c.Bytes())
}
