package journal

import (
	bolt "go.etcd.io/bbolt"
)

// TrafficDay is the agent's traffic counted on one UTC day, per server
// address.
type TrafficDay struct {
	// Day is the UTC day, in days since 1970-01-01.
	Day     uint32         `json:"day"`
	Servers []TrafficCount `json:"servers,omitempty"`
}

// TrafficCount is the traffic with one server address: datagrams, and
// their bytes as IP packets.
type TrafficCount struct {
	Server      string `json:"server"`
	SentBytes   uint64 `json:"sentBytes"`
	RecvBytes   uint64 `json:"recvBytes"`
	SentPackets uint64 `json:"sentPackets"`
	RecvPackets uint64 `json:"recvPackets"`
}

// Traffic returns the traffic counters last saved, oldest day first;
// none before the first SaveTraffic.
func (j *Journal) Traffic() ([]TrafficDay, error) {
	var days []TrafficDay
	err := j.view("read traffic", func(tx *bolt.Tx) error {
		_, err := getJSON(tx.Bucket(bucketTraffic), keyTraffic, &days)
		return err
	})
	return days, err
}

// SaveTraffic replaces the saved traffic counters with days. Like every
// write it is fsynced, so the agent saves them now and then, not per
// datagram: a power loss loses what was counted since the last save.
func (j *Journal) SaveTraffic(days []TrafficDay) error {
	return j.update("save traffic", func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketTraffic), keyTraffic, days)
	})
}
