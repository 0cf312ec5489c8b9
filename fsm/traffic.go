package fsm

// TrafficCounts counts datagrams and their bytes as IP packets (UDP
// payload plus IP and UDP headers), as an agent counts them.
type TrafficCounts struct {
	SentBytes   uint64 `json:"sent_bytes,omitempty"`
	RecvBytes   uint64 `json:"recv_bytes,omitempty"`
	SentPackets uint64 `json:"sent_packets,omitempty"`
	RecvPackets uint64 `json:"recv_packets,omitempty"`
}

// Add returns the sum of c and o.
func (c TrafficCounts) Add(o TrafficCounts) TrafficCounts {
	return TrafficCounts{
		SentBytes: c.SentBytes + o.SentBytes, RecvBytes: c.RecvBytes + o.RecvBytes,
		SentPackets: c.SentPackets + o.SentPackets, RecvPackets: c.RecvPackets + o.RecvPackets,
	}
}

// ServerTraffic is a device's traffic with one server address in a day.
type ServerTraffic struct {
	Server string `json:"server"`
	TrafficCounts
}

// DeviceTraffic is what a device's agent reported of its own traffic
// (protocol 1.3, docs/wire.md §6.5), with when its owner received it.
type DeviceTraffic struct {
	// AsOf is when the owner received the report that carried the counts
	// (owner's clock, Unix nanoseconds).
	AsOf int64 `json:"as_of"`
	// Day is the UTC day counted, in days since 1970-01-01.
	Day uint32 `json:"day"`
	// Servers are the day's counts so far per server address, sorted by
	// address.
	Servers []ServerTraffic `json:"servers,omitempty"`
	// Previous totals the day before Day over every server.
	Previous TrafficCounts `json:"previous,omitzero"`
}

// Total sums the day's counts over every server.
func (t *DeviceTraffic) Total() TrafficCounts {
	var sum TrafficCounts
	for _, s := range t.Servers {
		sum = sum.Add(s.TrafficCounts)
	}
	return sum
}
