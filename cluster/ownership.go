package cluster

import (
	"hash/fnv"
	"net/http"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"

	"github.com/meteor-edge/meteor/cluster/api"
)

// Device ownership. Every device has one owner among the alive servers,
// chosen by rendezvous (highest random weight) hashing over the servers of
// the device's own region (label "region"), or over all alive servers when
// its region has none. Every server computes the same owner from the same
// membership, with no coordination; when a server dies or leaves only its
// devices move, and they move back when it returns.

// ownerCandidate is a server that can own devices.
type ownerCandidate struct {
	ID, Region string
}

// ownerOf returns the owner of a device among servers, or "" if there are
// none.
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
			out = append(out, ownerCandidate{ID: m.ID, Region: m.Region})
		}
	}
	slices.SortFunc(out, func(a, b ownerCandidate) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// OwnerOf returns the server that owns a device with the given labels, as
// this server's gossip view has it.
func (s *Server) OwnerOf(deviceID string, labels map[string]string) string {
	return ownerOf(deviceID, labels["region"], s.gossip.ownerCandidates())
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
		shares[ownerOf(d.ID, d.Labels["region"], cands)]++
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
