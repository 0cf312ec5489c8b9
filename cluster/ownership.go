package cluster

import (
	"hash/fnv"
	"net/http"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// Device ownership. Every device has one owner among the alive servers.
// A device in session is owned by the server that holds its session, as
// the replica records it, when that server can own devices and is of the
// device's own region (label "region") or the region has no servers: its
// reports are then committed by the server they reach, with no forward to
// another server first. Any other device is owned by its home owner,
// chosen by rendezvous (highest random weight) hashing over the servers of
// the device's own region, or over all alive servers when its region has
// none. Every server computes the same owner from the same replica and
// membership, with no coordination; when a server dies or leaves only its
// devices move, and when a device's session moves its ownership follows.

// peerAPISessionOwner is the level of the server-to-server API
// (nodeMeta.PeerAPI) from which a server takes a device's session server
// for its owner (deviceOwner). Until every owner candidate runs it, every
// server keeps to home owners, as servers of earlier releases do: two
// servers that each took themselves for a device's owner would both judge
// it (the state machine keeps one status, but the judgements would fight).
const peerAPISessionOwner = 3

// ownerCandidate is a server that can own devices.
type ownerCandidate struct {
	ID, Region string
	// PeerAPI is the server's nodeMeta.PeerAPI.
	PeerAPI uint16
}

// deviceOwner returns the owner of the device whose replica record is rec
// among servers (sorted by ID, as ownerCandidates returns them), or "" if
// there are none: the server holding its session when the record says it
// is connected and that server is a candidate of the device's region (or
// its region has none) and every candidate follows sessions
// (peerAPISessionOwner); otherwise its home owner (ownerOf).
func deviceOwner(rec *fsm.DeviceRecord, servers []ownerCandidate) string {
	region := rec.Labels["region"]
	if rec.Connected && rec.Server != "" {
		follow, inRegion, held := true, false, -1
		for i, s := range servers {
			follow = follow && s.PeerAPI >= peerAPISessionOwner
			inRegion = inRegion || s.Region == region
			if s.ID == rec.Server {
				held = i
			}
		}
		if follow && held >= 0 && (!inRegion || servers[held].Region == region) {
			return rec.Server
		}
	}
	return ownerOf(rec.ID, region, servers)
}

// ownerOf returns the home owner of a device among servers, or "" if
// there are none: its owner when no server holds its session.
func ownerOf(deviceID, region string, servers []ownerCandidate) string {
	inRegion := false
	for _, s := range servers {
		if s.Region == region {
			inRegion = true
			break
		}
	}
	var best string
	var bestScore uint64
	for _, s := range servers {
		if inRegion && s.Region != region {
			continue
		}
		score := rendezvousScore(s.ID, deviceID)
		if best == "" || score > bestScore || score == bestScore && s.ID < best {
			best, bestScore = s.ID, score
		}
	}
	return best
}

func rendezvousScore(serverID, deviceID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(serverID))
	h.Write([]byte{0})
	h.Write([]byte(deviceID))
	// FNV's low bits mix poorly for similar inputs; finish with a
	// splitmix64 round so scores spread evenly.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// ownerCandidates returns the alive servers of this server's gossip view.
func (g *membership) ownerCandidates() []ownerCandidate {
	var out []ownerCandidate
	for _, m := range g.members() {
		if m.State == memberlist.StateAlive && !m.Leaving && !m.Draining {
			out = append(out, ownerCandidate{ID: m.ID, Region: m.Region, PeerAPI: m.PeerAPI})
		}
	}
	slices.SortFunc(out, func(a, b ownerCandidate) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// OwnerOf returns the server that owns a device, as this server's replica
// and gossip view have it; a device the replica does not know yet is
// given its home owner by the labels given.
func (s *Server) OwnerOf(deviceID string, labels map[string]string) string {
	cands := s.gossip.ownerCandidates()
	if rec, err := s.fsm.Read().Device(nil, deviceID); err == nil {
		return deviceOwner(rec, cands)
	}
	return ownerOf(deviceID, labels["region"], cands)
}

func (h *httpAPI) handleOwnership(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	devices, err := read.Devices(nil)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	cands := h.owners.ownerCandidates()
	shares := map[string]int{}
	for _, d := range devices {
		shares[deviceOwner(d, cands)]++
	}
	out := api.Ownership{Devices: len(devices)}
	for _, c := range cands {
		out.Servers = append(out.Servers, api.OwnerShare{ID: c.ID, Region: c.Region, Devices: shares[c.ID]})
	}
	if n := shares[""]; n > 0 {
		out.Unowned = n
	}
	writeJSON(w, http.StatusOK, out)
}
