package fsm

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm/intent"
)

const (
	tableIntents  = "intents"
	tableHistory  = "intent_history"
	tableDevices  = "devices"
	tableTimeline = "timeline"
	tableMeta     = "meta"
	tableTokens   = "tokens"
	tableAudit    = "audit"
	tableRevoked  = "revoked_devices"

	tableRollouts        = "rollouts"
	tableReleases        = "releases"
	tableRolloutEvents   = "rollout_events"
	tableRolloutOutcomes = "rollout_outcomes"

	tableClasses = "classes"
	tableWindows = "maintenance_windows"
)

// IntentRecord is the current version of an intent.
type IntentRecord struct {
	Name   string         `json:"name"`
	Intent *intent.Intent `json:"intent"`
	// CreateRevision is the revision that created this incarnation of the
	// intent; Revision the one that last changed it.
	CreateRevision uint64 `json:"create_revision"`
	Revision       uint64 `json:"revision"`
	// CreateIndex and ModifyIndex are the Raft indexes of those commands.
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
	// UpdatedAt is the proposer's time of the last change, Unix nanoseconds.
	UpdatedAt int64 `json:"updated_at"`
}

// HistoryRecord is one revision of an intent: what it said then, or that it
// was deleted. The document is kept as the JSON it was committed with,
// decoded only when asked for: history is most of the state and rarely
// read, and bytes cost the garbage collector nothing to scan.
type HistoryRecord struct {
	Name     string          `json:"name"`
	Revision uint64          `json:"revision"`
	Deleted  bool            `json:"deleted,omitempty"`
	Doc      json.RawMessage `json:"intent,omitempty"`
	Index    uint64          `json:"index"`
	Time     int64           `json:"time"`
	// Actor applied the revision (the zero Actor for a deletion by an
	// older proposer, or Meteor itself).
	Actor Actor `json:"actor,omitzero"`
	// DroppedFrom, when not 0, says that the intent's revisions from
	// DroppedFrom up to this one were dropped by the history limit while
	// an older revision was kept, because a rollout still released it.
	DroppedFrom uint64 `json:"dropped_from,omitempty"`
	// Truncated marks the oldest retained record of an intent whose
	// older revisions were dropped by the history limit.
	Truncated bool `json:"truncated,omitempty"`
}

// Intent decodes the document of the revision (nil for a deletion).
func (h *HistoryRecord) Intent() (*intent.Intent, error) {
	if h.Deleted || h.Doc == nil {
		return nil, nil
	}
	var in intent.Intent
	if err := json.Unmarshal(h.Doc, &in); err != nil {
		return nil, fmt.Errorf("decode intent %q at revision %d: %w", h.Name, h.Revision, err)
	}
	return &in, nil
}

// DeviceRecord is a device the cluster knows: its labels, its session and
// what its agent last reported.
type DeviceRecord struct {
	ID string `json:"id"`
	// Labels are the device's labels: the control plane's once
	// LabelsControlled, else what the device reported (see labels.go and
	// SelectionLabels).
	Labels map[string]string `json:"labels,omitempty"`
	// ReportedLabels are the labels the device's agent last reported: facts
	// it asserts about itself, not trusted for selection. Empty on records
	// from before the field, whose Labels hold what was reported.
	ReportedLabels map[string]string `json:"reported_labels,omitempty"`
	// LabelsControlled says Labels were set by the control plane (an
	// operator or the device's enrollment), at Raft index LabelsIndex.
	LabelsControlled bool   `json:"labels_controlled,omitempty"`
	LabelsIndex      uint64 `json:"labels_index,omitempty"`

	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
	// Revision is the cluster revision of the last change to the device's
	// labels (which changes its desired state).
	Revision  uint64 `json:"revision"`
	UpdatedAt int64  `json:"updated_at"`

	SessionID string `json:"session_id,omitempty"`
	// Server is the server the device is (or was last) connected to, and
	// Conn that connection's ID (a session lives on across connections).
	Server    string `json:"server,omitempty"`
	Conn      string `json:"conn,omitempty"`
	Connected bool   `json:"connected"`
	// AckedRevision is the highest desired revision the agent journaled.
	AckedRevision uint64 `json:"acked_revision"`
	// ReportSeq is the highest report sequence number applied.
	ReportSeq      uint64 `json:"report_seq"`
	ReportRevision uint64 `json:"report_revision,omitempty"`
	AgentStatus    string `json:"agent_status,omitempty"`
	BlockedReason  string `json:"blocked_reason,omitempty"`
	// LastSeen is when the device last connected, disconnected or
	// reported (proposer's clock, Unix nanoseconds).
	LastSeen  int64            `json:"last_seen"`
	Resources []ResourceStatus `json:"resources,omitempty"`

	// Status is the device's classified status, as its owner last
	// committed it, since StatusSince; Reason says why.
	Status       string `json:"status,omitempty"`
	StatusReason string `json:"status_reason,omitempty"`
	StatusSince  int64  `json:"status_since,omitempty"`
	NextRetry    int64  `json:"next_retry,omitempty"`
	ProgressAt   int64  `json:"progress_at,omitempty"`
	// StatusRevision is the desired revision the status was computed at.
	StatusRevision uint64 `json:"status_revision,omitempty"`
	// StatusOwner is the server that committed the status, at Raft index
	// StatusIndex. Another owner's transition applies only if it was
	// judged on that status (StatusTransition.Basis).
	StatusOwner string `json:"status_owner,omitempty"`
	StatusIndex uint64 `json:"status_index,omitempty"`
	// TimelineSeq numbers the device's timeline entries.
	TimelineSeq uint64 `json:"timeline_seq,omitempty"`
	// Timeline is the device's retained status transitions (Read.Timeline),
	// oldest first, one entry a sequence number. Kept in the record rather
	// than a row an entry, which cost memdb's index about 500 bytes an
	// entry; written to snapshots apart from the record, an entry a line
	// (snapshot.go). Shared between versions of the record: never changed,
	// only replaced (appendTimeline).
	Timeline []*TimelineEntry `json:"-"`
	// Traffic is the agent's count of its own traffic that the latest
	// report carrying one brought (agents of protocol 1.3); nil before.
	Traffic *DeviceTraffic `json:"traffic,omitempty"`
	// Locks are the workload locks held on the device, as its agent
	// (protocol 1.4) last reported them; Unlocks the operators' orders to
	// break one (fsm/unlock.go), the newest MaxUnlocks.
	Locks   []DeviceLock   `json:"locks,omitempty"`
	Unlocks []UnlockRecord `json:"unlocks,omitempty"`
	// Recovery is how its agent recovered at its latest start after a
	// crash or power loss, as it reported it; nil before one.
	Recovery *DeviceRecovery `json:"recovery,omitempty"`
	// Link is the device's link history as its sessions were recorded:
	// the servers judge from it whether it will make a rotation
	// deadline. Nil before its first disconnect.
	Link *LinkHistory `json:"link,omitempty"`
}

// LinkHistory is a device's recent time offline.
type LinkHistory struct {
	// OfflineSince is when its last session ended (Unix ns, the session
	// server's clock); 0 while one is connected.
	OfflineSince int64 `json:"offline_since,omitempty"`
	// Gaps are its last LinkGapLimit periods without a session, oldest
	// first.
	Gaps []LinkGap `json:"gaps,omitempty"`
}

// LinkGap is a period a device had no session, from the end of one to
// the start of the next (Unix ns).
type LinkGap struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// LinkGapLimit is how many gaps a device's link history keeps.
const LinkGapLimit = 16

// LongestGap returns the longest gap of the history; 0 for none (or a nil
// history).
func (h *LinkHistory) LongestGap() time.Duration {
	if h == nil {
		return 0
	}
	var out time.Duration
	for _, g := range h.Gaps {
		out = max(out, time.Duration(g.To-g.From))
	}
	return out
}

// TimelineEntry is one status transition of a device.
type TimelineEntry struct {
	Device    string            `json:"device"`
	Seq       uint64            `json:"seq"`
	Time      int64             `json:"time"`
	Index     uint64            `json:"index"`
	Revision  uint64            `json:"revision"`
	Status    string            `json:"status"`
	Reason    string            `json:"reason,omitempty"`
	Owner     string            `json:"owner,omitempty"`
	Resources map[string]string `json:"resources,omitempty"`
}

// metaRecord holds the cluster-wide counters.
type metaRecord struct {
	Key   string `json:"key"`
	Value uint64 `json:"value"`
}

const (
	metaRevision = "revision"
	metaIndex    = "index"
	// metaAuditCount is the number of audit records, derived from the
	// audit table (Restore counts them): not part of the snapshot.
	metaAuditCount = "audit_count"
	// metaRestoreSeq and metaRestoreID are the RestoreMark of the state
	// (the snapshot header carries them).
	metaRestoreSeq = "restore_seq"
	metaRestoreID  = "restore_id"
)

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableIntents: {
			Name: tableIntents,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		tableHistory: {
			Name: tableHistory,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Name"},
					&memdb.UintFieldIndex{Field: "Revision"},
				}}},
			},
		},
		tableDevices: {
			Name: tableDevices,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "ID"}},
			},
		},
		tableTokens: {
			Name: tableTokens,
			Indexes: map[string]*memdb.IndexSchema{
				"id":          {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Accessor"}},
				"secret_hash": {Name: "secret_hash", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "SecretHash"}},
			},
		},
		tableAudit: {
			Name: tableAudit,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.UintFieldIndex{Field: "Index"}},
			},
		},
		tableRevoked: {
			Name: tableRevoked,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "ID"}},
			},
		},
		tableRollouts: {
			Name: tableRollouts,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Intent"}},
			},
		},
		tableReleases: {
			Name: tableReleases,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Intent"},
					&memdb.StringFieldIndex{Field: "Device"},
				}}},
			},
		},
		tableRolloutEvents: {
			Name: tableRolloutEvents,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Intent"},
					&memdb.UintFieldIndex{Field: "Index"},
					&memdb.IntFieldIndex{Field: "N"},
				}}},
			},
		},
		tableRolloutOutcomes: {
			Name: tableRolloutOutcomes,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Intent"},
					&memdb.UintFieldIndex{Field: "Revision"},
				}}},
			},
		},
		tableClasses: {
			Name: tableClasses,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		tableWindows: {
			Name: tableWindows,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		tableMeta: {
			Name: tableMeta,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Key"}},
			},
		},
	}}
}
