package api

import (
	"fmt"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// Error codes carried in error responses.
const (
	CodeBadRequest      = "bad_request"        // 400: the document or request is invalid
	CodeNotFound        = "not_found"          // 404
	CodeMethod          = "method_not_allowed" // 405: the endpoint exists for other methods (Allow names them)
	CodeConflict        = "conflict"           // 409: If-Match did not match
	CodeNoLeader        = "no_leader"          // 503: no leader; nothing was written, retry
	CodeUnknownOutcome  = "unknown_outcome"    // 503: the write may or may not have been applied
	CodeTimeout         = "timeout"            // 503/504: the write was not committed in time
	CodeInternal        = "internal"           // 500
	CodeShuttingDown    = "shutting_down"      // 503: this server is stopping
	CodeUnauthenticated = "unauthenticated"    // 401: no valid token (with the ACL on)
	CodeForbidden       = "forbidden"          // 403: the token's policy or scope does not allow it
	CodeRateLimited     = "rate_limited"       // 429: too many failed authentications
	CodeTooLarge        = "request_too_large"  // 413: the body is over the limit the message names
	CodeHeldBack        = "held_back"          // 409: a server of the cluster runs a feature level too low for it (upgrade it first)
	CodeNotLeader       = "not_leader"         // 421: only the leader serves this request; LeaderAddr names it
	CodeCatchingUp      = "catching_up"        // 503: this server's replica trails the leader and does not know the token yet; retry
)

// Error is the body of every error response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"error"`
	// RetryAfterMS, when set, is how long to wait before retrying.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// CurrentRevision is set on conflicts.
	CurrentRevision *uint64 `json:"current_revision,omitempty"`
	// LeaderAddr is the leader's HTTP address (host:port) in a not_leader
	// answer.
	LeaderAddr string `json:"leader_addr,omitempty"`

	// StatusCode is the HTTP status (not part of the body).
	StatusCode int `json:"-"`
}

func (e *Error) Error() string {
	if e.RetryAfterMS > 0 {
		return fmt.Sprintf("%s (retry in %s)", e.Message, time.Duration(e.RetryAfterMS)*time.Millisecond)
	}
	return e.Message
}

// Retryable reports whether the request certainly had no effect and can be
// sent again as it is.
func (e *Error) Retryable() bool {
	return e.Code == CodeNoLeader || e.Code == CodeShuttingDown || e.Code == CodeCatchingUp
}

// WriteResponse answers a successful intent write or delete.
type WriteResponse struct {
	Name     string `json:"name"`
	Revision uint64 `json:"revision"`
	// Index is the Raft index of the write.
	Index uint64 `json:"index"`
	// Unchanged says the document equals the intent's current one: the
	// write made no revision, and Revision is the current one.
	Unchanged bool `json:"unchanged,omitempty"`
}

// IntentResponse is one intent: its current version, or the version at a
// requested revision.
type IntentResponse struct {
	Name string `json:"name"`
	// Revision is the revision that last changed the intent (as of the
	// requested revision, when one was asked for).
	Revision       uint64         `json:"revision"`
	CreateRevision uint64         `json:"create_revision,omitempty"`
	UpdatedAt      time.Time      `json:"updated_at"`
	Intent         *intent.Intent `json:"intent"`
}

// IntentSummary is one line of an intent listing.
type IntentSummary struct {
	Name      string            `json:"name"`
	Revision  uint64            `json:"revision"`
	Selector  map[string]string `json:"selector,omitempty"`
	Resources int               `json:"resources"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// IntentList is the answer to GET /v1/intents.
type IntentList struct {
	// Revision is the cluster revision the listing reflects.
	Revision uint64          `json:"revision"`
	Intents  []IntentSummary `json:"intents"`
}

// Member is one server of the cluster.
type Member struct {
	ID         string `json:"id"`
	Region     string `json:"region"`
	HTTPAddr   string `json:"http_addr"`
	RaftAddr   string `json:"raft_addr"`
	GossipAddr string `json:"gossip_addr"`
	// GossipState is alive, suspect, failed, left, or unknown (in the Raft
	// configuration but not seen through gossip).
	GossipState string `json:"gossip_state"`
	// RaftRole is leader, follower, candidate, or none (not a Raft member).
	RaftRole string `json:"raft_role"`
	// Suffrage is voter, nonvoter or none.
	Suffrage     string `json:"suffrage"`
	Leader       bool   `json:"leader"`
	AppliedIndex uint64 `json:"applied_index"`
	LastIndex    uint64 `json:"last_index"`
	Version      string `json:"version,omitempty"`
	// FeatureLevel and WireMinor are the state machine's feature level
	// and the agent protocol minor the server advertises in gossip (0:
	// it does not say; a server from before the fields runs level 1 and
	// minor 1).
	FeatureLevel uint16 `json:"feature_level,omitempty"`
	WireMinor    uint16 `json:"wire_minor,omitempty"`
	// Error says why the server's own figures could not be read.
	Error string `json:"error,omitempty"`
	// Diverged is set when the server's state hash differs from the
	// leader's at the same index; StateCheck says how the comparison
	// went (absent for the leader and for servers outside Raft).
	Diverged   bool        `json:"diverged,omitempty"`
	StateCheck *StateCheck `json:"state_check,omitempty"`
}

// State check results.
const (
	StateSame      = "same"      // the same state hash as the leader's at Index
	StateDiverged  = "diverged"  // another state hash than the leader's at Index
	StateUnchecked = "unchecked" // no comparison could be made (Note says why)
)

// StateCheck compares a server's replicated state with the leader's at
// one index both have applied (a checkpoint, every 16 indexes): replicas
// at different indexes are never compared.
type StateCheck struct {
	Server string `json:"server"`
	// Result is StateSame, StateDiverged or StateUnchecked.
	Result string `json:"result"`
	// Index is the checkpoint compared at; Hash is the server's state
	// hash there and LeaderHash the leader's.
	Index      uint64 `json:"index,omitempty"`
	Hash       string `json:"hash,omitempty"`
	LeaderHash string `json:"leader_hash,omitempty"`
	Note       string `json:"note,omitempty"`
}

// Members is the answer to GET /v1/cluster/members.
type Members struct {
	// Leader is the leader as this server's Raft knows it, and only if it
	// is a voter of the Raft configuration ("" otherwise).
	Leader  string   `json:"leader"`
	Members []Member `json:"members"`
}

// Health is the answer to GET /v1/health.
type Health struct {
	Node      string `json:"node"`
	Region    string `json:"region"`
	RaftState string `json:"raft_state"`
	// Leader is the leader as this server's Raft knows it, and only if it
	// is a voter of the Raft configuration ("" otherwise).
	Leader string `json:"leader"`
	// Term is this server's current Raft term. Every election, won or
	// not, starts a new term, so the growth of the highest term across
	// the servers counts the elections held in a period.
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	LastIndex    uint64 `json:"last_index"`
	CommitIndex  uint64 `json:"commit_index"`
	// StateIndex is the index of the last command the server's replica
	// applied (AppliedIndex counts entries that are not commands too).
	StateIndex uint64 `json:"state_index,omitempty"`
	Revision   uint64 `json:"revision"`
	Healthy    bool   `json:"healthy"`
	Message    string `json:"message,omitempty"`
	Version    string `json:"version"`
	// FeatureLevel is the feature level of the server's state machine
	// (rolling upgrades: docs/operations.md, "Upgrading"); ActiveLevel
	// the cluster's active level as its replica has applied it.
	FeatureLevel uint16 `json:"feature_level,omitempty"`
	ActiveLevel  uint16 `json:"active_level,omitempty"`
	// RestoreSeq and RestoreID name the operator restore of a snapshot
	// the server's state descends from (0 and "": none).
	RestoreSeq uint64 `json:"restore_seq,omitempty"`
	RestoreID  string `json:"restore_id,omitempty"`
	// Diverged lists the servers whose state hash differs from the
	// leader's at the same index (GET /v1/health only); the server is not
	// healthy while it is not empty.
	Diverged []StateCheck `json:"diverged,omitempty"`
}

// Response headers.
const (
	HeaderRevision    = "X-Meteor-Revision"    // cluster revision the answer reflects
	HeaderIndex       = "X-Meteor-Index"       // Raft index the answer reflects
	HeaderLeader      = "X-Meteor-Leader"      // known leader's node ID
	HeaderConsistency = "X-Meteor-Consistency" // linearizable or stale
	HeaderServedBy    = "X-Meteor-Served-By"   // node that produced the answer
)

// DeviceSummary is one line of a device listing.
type DeviceSummary struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
	// Connected says whether the device has a session now; Server names
	// the server it is (or was last) connected to.
	Connected bool   `json:"connected"`
	Server    string `json:"server,omitempty"`
	// Owner is the server that owns the device (docs/architecture.md).
	Owner           string    `json:"owner,omitempty"`
	DesiredRevision uint64    `json:"desired_revision"`
	AckedRevision   uint64    `json:"acked_revision"`
	Converged       bool      `json:"converged"`
	Resources       int       `json:"resources"`
	LastSeen        time.Time `json:"last_seen"`
	// Counts of resources per state (see ResourceState).
	Counts map[string]int `json:"counts,omitempty"`
	// Status is the device's status as its owner last committed it, with
	// a reason a person can act on; NextRetry is set for failed devices.
	Status       string     `json:"status,omitempty"`
	StatusReason string     `json:"status_reason,omitempty"`
	StatusSince  *time.Time `json:"status_since,omitempty"`
	NextRetry    *time.Time `json:"next_retry,omitempty"`
	// Intent is the device's state on the intent a query named
	// (?intent=NAME); Resource the state of the resource it named
	// (?resource=KEY).
	Intent   *DeviceIntent  `json:"intent,omitempty"`
	Resource *ResourceState `json:"resource,omitempty"`
	// TrafficToday is, in a listing sorted by traffic (?sort=traffic),
	// the device's traffic on the answering server's UTC day so far, as
	// its agent last reported it; absent for a device whose agent never
	// reported any (before protocol 1.3).
	TrafficToday *TrafficCounts `json:"traffic_today,omitempty"`
}

// TrafficCounts counts datagrams and their bytes as IP packets (UDP
// payload plus IP and UDP headers), as a device's agent counts them.
type TrafficCounts struct {
	SentBytes   uint64 `json:"sent_bytes"`
	RecvBytes   uint64 `json:"recv_bytes"`
	SentPackets uint64 `json:"sent_packets"`
	RecvPackets uint64 `json:"recv_packets"`
}

// Bytes returns the bytes sent and received.
func (c TrafficCounts) Bytes() uint64 { return c.SentBytes + c.RecvBytes }

// ServerTraffic is a device's traffic with one server address in a day.
type ServerTraffic struct {
	// Server is the address as the agent dials it (host:port).
	Server string `json:"server"`
	TrafficCounts
}

// DeviceTraffic is what a device's agent counted of its own traffic with
// the servers (every datagram of its socket, RTT probes included), as the
// latest report that carried it said (agents of protocol 1.3;
// docs/agent.md, "Traffic counters").
type DeviceTraffic struct {
	// AsOf is when the device's owner received that report.
	AsOf time.Time `json:"as_of"`
	// Day is the UTC day counted (2006-01-02); Today is its counts so
	// far, Servers the same per server address.
	Day     string          `json:"day"`
	Today   TrafficCounts   `json:"today"`
	Servers []ServerTraffic `json:"servers"`
	// PreviousDay is the day before Day; Previous its counts summed over
	// every server (zero if the agent did not count that day).
	PreviousDay string        `json:"previous_day"`
	Previous    TrafficCounts `json:"previous"`
}

// DeviceIntent is a device's state on one intent.
type DeviceIntent struct {
	Name string `json:"name"`
	// Revision is the revision of the intent the device is meant to hold
	// (the one a rollout released to it); CurrentRevision the intent's.
	Revision        uint64 `json:"revision"`
	CurrentRevision uint64 `json:"current_revision"`
	// State is converged (every resource of the intent converged on
	// Revision), not-released (a rollout has not released the current
	// revision to it yet), or the worst state of its resources: failed,
	// drifted, progressing or pending.
	State     string `json:"state"`
	Resources int    `json:"resources"`
	Converged int    `json:"converged"`
}

// DeviceGroup counts the devices of a query with one value of its
// group_by, naming a few of them.
type DeviceGroup struct {
	Value  string   `json:"value"`
	Count  int      `json:"count"`
	Sample []string `json:"sample"`
}

// DeviceList is the answer to GET /v1/devices.
type DeviceList struct {
	Revision uint64 `json:"revision"`
	// Index is the Raft index of the replica state listed (FleetStatus.Index).
	Index uint64 `json:"index"`
	// Matched counts every device that passed the query's filters, on
	// this page and after it.
	Matched int             `json:"matched"`
	Devices []DeviceSummary `json:"devices,omitzero"`
	// Next, when set, is the ?after= of the next page.
	Next string `json:"next,omitempty"`
	// GroupBy and Groups answer a query with group_by: the matching
	// devices counted per value, most first.
	GroupBy string        `json:"group_by,omitempty"`
	Groups  []DeviceGroup `json:"groups,omitempty"`
	// Sort is the order of a query with sort ("traffic": heaviest first);
	// empty for ID order.
	Sort string `json:"sort,omitempty"`
}

// ResourceState puts a resource's intended, applied and effective states
// side by side. State is pending, progressing, failed, applied, converged,
// drifted or removing.
type ResourceState struct {
	Key              string `json:"key"`
	State            string `json:"state"`
	IntendedDigest   string `json:"intended_digest,omitempty"`
	IntendedRevision uint64 `json:"intended_revision,omitempty"`
	AppliedDigest    string `json:"applied_digest,omitempty"`
	AppliedRevision  uint64 `json:"applied_revision,omitempty"`
	Effective        string `json:"effective,omitempty"`
	// AgentState is the agent's own state of the resource: pending,
	// progressing, converged, drifted, overridden, blocked or failed.
	AgentState string `json:"agent_state,omitempty"`
	// Detail is the agent's text on the resource. Agents of protocol 1.0
	// start it with their state, which AgentState also gives.
	Detail    string     `json:"detail,omitempty"`
	LastError string     `json:"last_error,omitempty"`
	Attempts  uint32     `json:"attempts,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	// Corrections counts the drift corrections the agent made since it
	// started (agents of protocol 1.2 and later).
	Corrections uint32 `json:"corrections,omitempty"`
	// Status is the resource's status as the servers judge it (the
	// device statuses a resource takes: pending, progressing, converged,
	// drifted, overridden, blocked, failed, deadline-at-risk,
	// deadline-missed); Reason says why. GET /v1/devices/{id} only.
	Status string `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Rotation is the resource's rotation window, as the intent gives it.
	Rotation *Rotation `json:"rotation,omitempty"`
	// Hold is what holds the resource back on the device, as its agent
	// (protocol 1.4) reports it.
	Hold *Hold `json:"hold,omitempty"`
}

// Rotation is a resource's rotation window (RFC 3339 times).
type Rotation struct {
	NotBefore string `json:"not_before,omitempty"`
	Deadline  string `json:"deadline,omitempty"`
}

// Hold is what holds a resource back on its device: kind override (a
// site operator pinned it until Until, for the reason in Note; Holder is
// who), fighting (something keeps undoing it: corrected Count times since
// Since, the next correction at Until), window (a disruptive step waits
// for the maintenance window Holder, opening at Until), lock (a step
// waits for the lock Note, held by Holder since Since, stale at Until),
// precondition (Note says which) or schedule (its rotation window opens at
// Until).
type Hold struct {
	Kind   string     `json:"kind"`
	Since  *time.Time `json:"since,omitempty"`
	Until  *time.Time `json:"until,omitempty"`
	Count  uint32     `json:"count,omitempty"`
	Holder string     `json:"holder,omitempty"`
	Note   string     `json:"note,omitempty"`
}

// LinkHistory is a device's recent time without a session, from which
// the servers judge whether it will make a rotation deadline.
type LinkHistory struct {
	// OfflineSince is when its last session ended; absent while connected.
	OfflineSince *time.Time `json:"offline_since,omitempty"`
	// Gaps are its last periods without a session, oldest first.
	Gaps []LinkGap `json:"gaps,omitempty"`
}

// LinkGap is one period without a session.
type LinkGap struct {
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Duration string    `json:"duration"`
}

// Device is the answer to GET /v1/devices/{id}.
type Device struct {
	DeviceSummary
	// ReportedLabels are the labels the device's agent reports, facts it
	// states about itself; LabelsControlled says DeviceSummary.Labels
	// (what intents select it by) come from the control plane.
	ReportedLabels   map[string]string `json:"reported_labels,omitempty"`
	LabelsControlled bool              `json:"labels_controlled"`
	SessionID        string            `json:"session_id,omitempty"`
	ReportSeq        uint64            `json:"report_seq"`
	AgentStatus      string            `json:"agent_status,omitempty"`
	BlockedReason    string            `json:"blocked_reason,omitempty"`
	States           []ResourceState   `json:"resource_states"`
	// Traffic is what the device's agent last reported of its own
	// traffic; absent before a report of protocol 1.3 carried any.
	Traffic *DeviceTraffic `json:"traffic,omitempty"`
	// Link is its link history; absent before its first disconnect.
	Link *LinkHistory `json:"link,omitempty"`
	// Locks are the workload locks held on it, as its agent (protocol
	// 1.4) last reported them; Unlocks the operators' orders to break one
	// and their outcomes.
	Locks   []DeviceLock  `json:"locks,omitempty"`
	Unlocks []UnlockOrder `json:"unlocks,omitempty"`
	// Recovery is how its agent recovered at its latest start after a
	// crash or power loss (agents of protocol 1.4); absent before one.
	Recovery *DeviceRecovery `json:"recovery,omitempty"`
}

// DeviceRecovery is how a device's agent recovered at its latest start
// after a crash or power loss.
type DeviceRecovery struct {
	// At is when the agent started (the device's clock).
	At time.Time `json:"at"`
	// Unclean says the agent before did not stop cleanly: a crash or a
	// power loss.
	Unclean bool `json:"unclean"`
	// Desired counts the resources desired then; AppliedBefore those
	// applied at their desired digest when the agent stopped.
	Desired       int `json:"desired"`
	AppliedBefore int `json:"applied_before"`
	// Interrupted are the steps it found in flight and how each was
	// resolved; Story tells it all in a sentence.
	Interrupted []RecoveredStep `json:"interrupted,omitempty"`
	Story       string          `json:"story"`
}

// RecoveredStep is a step a restart interrupted: Outcome "already
// applied" (the re-check found it done), "applied again" or "no longer
// desired"; Process "waited for" or "ended" when a process of the step
// survived the restart.
type RecoveredStep struct {
	Resource string `json:"resource"`
	Outcome  string `json:"outcome"`
	Process  string `json:"process,omitempty"`
}

// DeviceLock is a workload lock held on a device.
type DeviceLock struct {
	Name   string    `json:"name"`
	Holder string    `json:"holder,omitempty"`
	Since  time.Time `json:"since"`
	// MaxHold is how long it may be held (a Go duration; empty: no limit);
	// Stale says it is held longer.
	MaxHold string `json:"max_hold,omitempty"`
	Stale   bool   `json:"stale"`
	// Source is "agent" (taken through the agent) or "file" (a lock file).
	Source string `json:"source"`
}

// UnlockOrder is an operator's order to break a lock on a device.
type UnlockOrder struct {
	Index  uint64    `json:"index"`
	Lock   string    `json:"lock"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
	Actor  string    `json:"actor"`
	Time   time.Time `json:"time"`
	// Outcome is empty until the device answers: "broken", "not held" or
	// "taken again since" (a later acquisition, which is kept).
	Outcome   string     `json:"outcome,omitempty"`
	OutcomeAt *time.Time `json:"outcome_at,omitempty"`
}

// UnlockDeviceRequest is the body of POST /v1/devices/{id}/unlock.
type UnlockDeviceRequest struct {
	Lock   string `json:"lock"`
	Reason string `json:"reason"`
}

// OwnerShare is one server's share of the devices.
type OwnerShare struct {
	ID      string `json:"id"`
	Region  string `json:"region"`
	Devices int    `json:"devices"`
}

// Ownership is the answer to GET /v1/cluster/ownership: how the devices the
// cluster knows are spread over the alive servers, as the contacted
// server's gossip view has it.
type Ownership struct {
	Devices int          `json:"devices"`
	Servers []OwnerShare `json:"servers"`
	// Unowned counts devices with no alive server to own them.
	Unowned int `json:"unowned,omitempty"`
}

// TimelineEntry is one status transition of a device.
type TimelineEntry struct {
	Time     time.Time `json:"time"`
	Revision uint64    `json:"revision"`
	Status   string    `json:"status"`
	Reason   string    `json:"reason,omitempty"`
	// Owner is the server that committed the transition.
	Owner string `json:"owner,omitempty"`
	// Resources are the resources whose status changed, and to what.
	Resources map[string]string `json:"resources,omitempty"`
}

// Timeline is the answer to GET /v1/devices/{id}/timeline.
type Timeline struct {
	Device  string          `json:"device"`
	Entries []TimelineEntry `json:"entries"`
}

// IntentCounts counts the devices an intent revision targets by where they
// are with it.
type IntentCounts struct {
	Targeted int `json:"targeted"`
	// Released counts the targeted devices the revision is released to;
	// the others hold an earlier one until their wave of the rollout
	// (docs/rollouts.md). Without a rollout it equals Targeted. Every other
	// count is of released devices.
	Released     int `json:"released"`
	Acknowledged int `json:"acknowledged"`
	Converged    int `json:"converged"`
	Failed       int `json:"failed"`
	Drifted      int `json:"drifted"`
	Unreachable  int `json:"unreachable"`
}

// ProgressPoint is the count of targeted devices per status at a time.
type ProgressPoint struct {
	Time   time.Time      `json:"time"`
	Counts map[string]int `json:"counts"`
}

// IntentProgress is the answer to GET /v1/intents/{name}/progress.
type IntentProgress struct {
	Name      string    `json:"name"`
	Revision  uint64    `json:"revision"`
	UpdatedAt time.Time `json:"updated_at"`
	// Index is the Raft index of the replica state the answer was
	// computed from (for a blocking read's ?index).
	Index uint64 `json:"index"`
	IntentCounts
	// Series counts the targeted devices by device status over time since
	// the revision, one point per committed transition (thinned to at most
	// 120 points).
	Series []ProgressPoint `json:"series,omitempty"`
}

// FleetStatus is the answer to GET /v1/status.
type FleetStatus struct {
	Revision uint64 `json:"revision"`
	// Index is the Raft index of the replica state the answer was
	// computed from (also in the X-Meteor-Index header): two answers with
	// the same index describe the same state.
	Index   uint64 `json:"index"`
	Devices int    `json:"devices"`
	// ByStatus counts devices by status (pending, progressing, converged,
	// drifted, overridden, blocked, failed, unreachable, stuck).
	ByStatus map[string]int `json:"by_status"`
	// Intents summarises every current intent at its current revision.
	Intents []IntentProgress `json:"intents"`
}

// Event is one change on the event stream (GET /v1/events): what changed
// in the replicated state, in log order. ID is "INDEX-N": the Raft index
// of the command that caused it and its position among that command's
// events, the same on every server, so a stream resumes anywhere. Fields
// that do not apply to the kind are empty.
type Event struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Action says what happened within the kind (docs/api.md lists them).
	Action    string            `json:"action,omitempty"`
	Index     uint64            `json:"index"`
	Time      time.Time         `json:"time"`
	Intent    string            `json:"intent,omitempty"`
	Revision  uint64            `json:"revision,omitempty"`
	Wave      int               `json:"wave,omitempty"`
	Device    string            `json:"device,omitempty"`
	Status    string            `json:"status,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	Message   string            `json:"message,omitempty"`
	Devices   int               `json:"devices,omitempty"`
	Resources map[string]string `json:"resources,omitempty"`
	Counts    *RolloutCounts    `json:"counts,omitempty"`
	Actor     string            `json:"actor,omitempty"`
}

// EventReset is the kind of the event a stream sends when events after
// the client's last one are no longer kept by the server (or were never
// seen by it, before a snapshot it installed): the client must read the
// state again. Its ID is where the stream goes on from.
const EventReset = "reset"
