package wire

import (
	"math"
	"time"
)

// MaxTrafficServers bounds the per-server rows of a Report's traffic. An
// agent with more addresses to count folds the lightest into one row.
const MaxTrafficServers = 32

// TrafficCounts counts datagrams and their bytes as IP packets: the UDP
// payload plus the IP and UDP headers (28 bytes for IPv4, 48 for IPv6).
type TrafficCounts struct {
	SentBytes, RecvBytes     uint64
	SentPackets, RecvPackets uint64
}

// Add returns the sum of c and o.
func (c TrafficCounts) Add(o TrafficCounts) TrafficCounts {
	return TrafficCounts{
		SentBytes: c.SentBytes + o.SentBytes, RecvBytes: c.RecvBytes + o.RecvBytes,
		SentPackets: c.SentPackets + o.SentPackets, RecvPackets: c.RecvPackets + o.RecvPackets,
	}
}

// Bytes returns the bytes sent and received.
func (c TrafficCounts) Bytes() uint64 { return c.SentBytes + c.RecvBytes }

// ServerTraffic is an agent's traffic with one server address in a day.
type ServerTraffic struct {
	// Server is the address as the agent dials it (host:port, as
	// configured or redirected to), or the remote address itself for
	// datagrams of an address no server resolved to.
	Server string
	TrafficCounts
}

// Traffic is an agent's count of its own traffic on its socket, every
// connection and RTT probe included: a Report carries it with the traffic
// flag (bit 3, protocol 1.3), set only in a session at minor 3 or above.
type Traffic struct {
	// Day is the UTC day counted, in days since 1970-01-01 (TrafficDay).
	Day uint32
	// Servers are the day's counts so far per server address, sorted by
	// Server, without duplicates or empty addresses.
	Servers []ServerTraffic
	// Previous totals the day before Day over every server; zero if the
	// agent did not count then.
	Previous TrafficCounts
}

// Total sums the day's counts over every server.
func (t *Traffic) Total() TrafficCounts {
	var sum TrafficCounts
	for _, s := range t.Servers {
		sum = sum.Add(s.TrafficCounts)
	}
	return sum
}

// TrafficDay returns the UTC day of t as Traffic.Day counts it; a time
// before 1970 is day 0.
func TrafficDay(t time.Time) uint32 {
	d := t.Unix() / 86400
	if d < 0 {
		return 0
	}
	return uint32(min(d, math.MaxUint32))
}

// TrafficDayStart returns the start (00:00 UTC) of a day as Traffic.Day
// counts it.
func TrafficDayStart(day uint32) time.Time { return time.Unix(int64(day)*86400, 0).UTC() }

// trafficRowMinLen is the least bytes of one server row: an empty
// string's length and four one-byte counts.
const trafficRowMinLen = 1 + 4

func appendTrafficCounts(b []byte, c TrafficCounts) []byte {
	b = appendUvarint(b, c.SentBytes)
	b = appendUvarint(b, c.RecvBytes)
	b = appendUvarint(b, c.SentPackets)
	return appendUvarint(b, c.RecvPackets)
}

func trafficCountsLen(c TrafficCounts) int {
	return uvarintLen(c.SentBytes) + uvarintLen(c.RecvBytes) + uvarintLen(c.SentPackets) + uvarintLen(c.RecvPackets)
}

func appendTraffic(b []byte, t *Traffic) []byte {
	b = appendUvarint(b, uint64(t.Day))
	b = appendUvarint(b, uint64(len(t.Servers)))
	for _, s := range t.Servers {
		b = appendString(b, s.Server)
		b = appendTrafficCounts(b, s.TrafficCounts)
	}
	return appendTrafficCounts(b, t.Previous)
}

func trafficLen(t *Traffic) int {
	n := uvarintLen(uint64(t.Day)) + uvarintLen(uint64(len(t.Servers))) + trafficCountsLen(t.Previous)
	for _, s := range t.Servers {
		n += stringLen(s.Server) + trafficCountsLen(s.TrafficCounts)
	}
	return n
}

func (d *decoder) trafficCounts() TrafficCounts {
	return TrafficCounts{SentBytes: d.uvarint(), RecvBytes: d.uvarint(), SentPackets: d.uvarint(), RecvPackets: d.uvarint()}
}

func (d *decoder) traffic() *Traffic {
	t := &Traffic{}
	if day := d.uvarint(); day <= math.MaxUint32 {
		t.Day = uint32(day)
	} else {
		d.malformed("traffic day %d overflows 32 bits", day)
	}
	if n := d.length(MaxTrafficServers, trafficRowMinLen, "traffic servers"); n > 0 {
		t.Servers = make([]ServerTraffic, n)
		for i := range t.Servers {
			s := &t.Servers[i]
			s.Server = d.str(MaxNameLen, "traffic server")
			s.TrafficCounts = d.trafficCounts()
			switch {
			case d.err != nil:
			case s.Server == "":
				d.malformed("traffic server: empty address")
			case i > 0 && s.Server <= t.Servers[i-1].Server:
				d.malformed("traffic servers not strictly increasing")
			}
		}
	}
	t.Previous = d.trafficCounts()
	return t
}
