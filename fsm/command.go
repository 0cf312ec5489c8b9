package fsm

import (
	"encoding/json"
	"errors"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// MessageType is the first byte of every command in the Raft log.
type MessageType uint8

const (
	// PutIntentType creates or replaces an intent.
	PutIntentType MessageType = 1
	// DeleteIntentType deletes an intent, keeping its history.
	DeleteIntentType MessageType = 2
	// UpsertDeviceType registers a device or updates its labels.
	UpsertDeviceType MessageType = 3
	// DeviceSessionType records a device's session: which server it is
	// connected to, its labels and its acknowledged desired revision.
	DeviceSessionType MessageType = 4
	// Type 5 is reserved (an early per-report command that status batches
	// replaced); do not reuse it.
	// StatusBatchType records a batch of device status transitions,
	// committed by the devices' owners.
	StatusBatchType MessageType = 6
	// DeviceSessionBatchType records several device session events in one
	// entry, in order, each as DeviceSessionType would.
	DeviceSessionBatchType MessageType = 7
	// CreateTokenType creates an operator or enroll token.
	CreateTokenType MessageType = 8
	// RevokeTokenType deletes a token.
	RevokeTokenType MessageType = 9
	// UseEnrollTokenType spends one use of an enroll token, enrolling a
	// device with the token's labels.
	UseEnrollTokenType MessageType = 10
	// SetDeviceLabelsType sets a device's control-plane labels.
	SetDeviceLabelsType MessageType = 11
	// RevokeDeviceType revokes a device.
	RevokeDeviceType MessageType = 12
	// UnrevokeDeviceType undoes a device's revocation.
	UnrevokeDeviceType MessageType = 13
	// AuditMemberChangeType records a membership change in the audit log.
	AuditMemberChangeType MessageType = 14
	// RolloutStepType records a decision of the leader's rollout worker:
	// releases, wave and gate state, completion or revert.
	RolloutStepType MessageType = 15
	// RolloutControlType records an operator's action on a rollout:
	// approve, pause, resume or abort.
	RolloutControlType MessageType = 16
	// PutClassType creates, replaces or deletes a reconcile class.
	PutClassType MessageType = 17
	// PutWindowType creates, replaces or deletes a maintenance window.
	PutWindowType MessageType = 18
	// DeviceUnlockType orders a workload lock on a device broken.
	DeviceUnlockType MessageType = 19
	// AuditOperationType records in the audit log an operator's operation
	// on the whole cluster that changes no other replicated state (a
	// snapshot saved or restored). Feature level 2.
	AuditOperationType MessageType = 20
	// SetFeatureLevelType raises the cluster's active feature level
	// (features.go). Feature level 3.
	SetFeatureLevelType MessageType = 21

	// IgnoreUnknownTypeFlag marks a command that older servers may skip
	// rather than panic on. Set it only on commands whose loss cannot make
	// replicas diverge (for example, advisory data). Without it an unknown
	// type stops the server, which is the safe outcome.
	IgnoreUnknownTypeFlag MessageType = 128
)

func (t MessageType) String() string {
	switch t {
	case PutIntentType:
		return "put-intent"
	case DeleteIntentType:
		return "delete-intent"
	case UpsertDeviceType:
		return "upsert-device"
	case DeviceSessionType:
		return "device-session"
	case StatusBatchType:
		return "status-batch"
	case DeviceSessionBatchType:
		return "device-session-batch"
	case CreateTokenType:
		return "create-token"
	case RevokeTokenType:
		return "revoke-token"
	case UseEnrollTokenType:
		return "use-enroll-token"
	case SetDeviceLabelsType:
		return "set-device-labels"
	case RevokeDeviceType:
		return "revoke-device"
	case UnrevokeDeviceType:
		return "unrevoke-device"
	case AuditMemberChangeType:
		return "audit-member-change"
	case RolloutStepType:
		return "rollout-step"
	case RolloutControlType:
		return "rollout-control"
	case PutClassType:
		return "put-class"
	case PutWindowType:
		return "put-maintenance-window"
	case DeviceUnlockType:
		return "device-unlock"
	case AuditOperationType:
		return "audit-operation"
	case SetFeatureLevelType:
		return "set-feature-level"
	}
	return fmt.Sprintf("type-%d", uint8(t))
}

// PutIntentRequest creates or replaces an intent.
type PutIntentRequest struct {
	Intent *intent.Intent `json:"intent"`
	// IfMatch, when set, makes the write conditional: it succeeds only if
	// the intent's current revision equals *IfMatch. Zero means "only if
	// the intent does not exist".
	IfMatch *uint64 `json:"if_match,omitempty"`
	// Time is the proposer's wall clock (Unix nanoseconds), recorded as the
	// intent's update time.
	Time int64 `json:"time"`
	// Actor is who asked for the change (the audit log records it); the
	// zero Actor is Meteor itself.
	Actor Actor `json:"actor,omitzero"`
}

// DeleteIntentRequest deletes an intent.
type DeleteIntentRequest struct {
	Name    string  `json:"name"`
	IfMatch *uint64 `json:"if_match,omitempty"`
	Time    int64   `json:"time"`
	Actor   Actor   `json:"actor,omitzero"`
}

// UpsertDeviceRequest registers a device or replaces its labels.
type UpsertDeviceRequest struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
	Time   int64             `json:"time"`
}

// DeviceSessionRequest records a session event of a device. Connecting
// registers the device (with its labels) if it is new.
type DeviceSessionRequest struct {
	ID        string            `json:"id"`
	Labels    map[string]string `json:"labels,omitempty"`
	SessionID string            `json:"session_id"`
	// Server is the server the device is connected to, Conn the ID that
	// server gave the connection: a disconnect counts only for the
	// connection it ends, not for a later one of the same session.
	Server    string `json:"server"`
	Conn      string `json:"conn,omitempty"`
	Connected bool   `json:"connected"`
	// AckedRevision is the desired revision the agent has journaled; the
	// stored value never goes backwards.
	AckedRevision uint64 `json:"acked_revision"`
	Time          int64  `json:"time"`
}

// DeviceSessionBatchRequest records session events in order. An event
// DeviceSessionType would reject (a disconnect of an unknown device) is
// skipped; the others apply.
type DeviceSessionBatchRequest struct {
	Sessions []DeviceSessionRequest `json:"sessions"`
}

// ResourceStatus is what an agent reports for one resource.
type ResourceStatus struct {
	Key string `json:"key"`
	// AppliedDigest is the hex SHA-256 of the resource body applied.
	AppliedDigest   string `json:"applied_digest,omitempty"`
	AppliedRevision uint64 `json:"applied_revision,omitempty"`
	// Effective is ok, mismatch or unknown.
	Effective string `json:"effective"`
	// State is the agent's state of the resource (pending, progressing,
	// converged, drifted, overridden, blocked or failed). Empty: the
	// report came from an agent of protocol 1.0 (or predates the field),
	// whose Detail starts with the state's name and ": " instead.
	State     string `json:"state,omitempty"`
	Detail    string `json:"detail,omitempty"`
	LastError string `json:"last_error,omitempty"`
	Attempts  uint32 `json:"attempts,omitempty"`
	UpdatedAt int64  `json:"updated_at,omitempty"`
	// Corrections counts the drift corrections the agent made since it
	// started (protocol 1.2; zero from older agents).
	Corrections uint32 `json:"corrections,omitempty"`
	// Hold says what holds the resource back on the device (protocol
	// 1.4); nil for nothing.
	Hold *ResourceHold `json:"hold,omitempty"`
}

// ResourceHold is what holds a resource back on its device, as its agent
// reported it (wire.Hold): an override, a fight, a maintenance window, a
// lock, a precondition or a rotation window not open yet.
type ResourceHold struct {
	// Kind is override, fighting, window, lock, precondition or schedule.
	Kind string `json:"kind"`
	// Since and Until are Unix nanoseconds; 0 for none.
	Since  int64  `json:"since,omitempty"`
	Until  int64  `json:"until,omitempty"`
	Count  uint32 `json:"count,omitempty"`
	Holder string `json:"holder,omitempty"`
	Note   string `json:"note,omitempty"`
}

// StatusTransition is one device's change of status, with what its agent
// reported since the last one. An owner commits a transition only when
// something changed: a heartbeat that changes nothing costs no entry.
type StatusTransition struct {
	Device string `json:"device"`
	// Seq is the highest report sequence number the transition includes
	// (0 when it comes from the owner's clock, not a report). Resources of
	// a report at or below the stored sequence are not applied again.
	Seq uint64 `json:"seq,omitempty"`
	// Time is when the owner observed the change (Unix nanoseconds).
	Time int64 `json:"time"`
	// Revision is the device's desired revision at the time.
	Revision uint64 `json:"revision"`
	Status   string `json:"status"`
	Reason   string `json:"reason,omitempty"`
	// NextRetry is when a failed apply will be retried (Unix nanoseconds).
	NextRetry int64 `json:"next_retry,omitempty"`
	// ProgressAt is when the device last made progress (stuck detection
	// survives a change of owner).
	ProgressAt int64 `json:"progress_at,omitempty"`
	// LastSeen is the last contact with the device.
	LastSeen      int64            `json:"last_seen,omitempty"`
	AgentStatus   string           `json:"agent_status,omitempty"`
	BlockedReason string           `json:"blocked_reason,omitempty"`
	Full          bool             `json:"full,omitempty"`
	Resources     []ResourceStatus `json:"resources,omitempty"`
	// ResourceStates are the classified per-resource statuses that changed.
	ResourceStates map[string]string `json:"resource_states,omitempty"`
	// Basis is the StatusIndex of the stored status the owner judged
	// from. While ownership moves, two servers can each believe they own
	// a device for a moment; a transition of an owner that did not write
	// the stored status, judged on an older one (Basis below the record's
	// StatusIndex), is stale: its status is not applied (its report
	// contents still are, by sequence number).
	Basis uint64 `json:"basis,omitempty"`
	// Traffic is the agent's traffic the report carried, stamped with
	// when the owner received it; it replaces the record's. Nil: the
	// report carried none (the record's stays).
	Traffic *DeviceTraffic `json:"traffic,omitempty"`
	// Edge says the report carried the device's locks (protocol 1.4):
	// Locks replace the record's. Unlocked are the agent's outcomes of
	// lock breaks, recorded on the orders.
	Edge     bool           `json:"edge,omitempty"`
	Locks    []DeviceLock   `json:"locks,omitempty"`
	Unlocked []UnlockResult `json:"unlocked,omitempty"`
	// Recovery is the agent's latest recovery the report carried; the
	// record takes it, with a timeline entry, if it is newer.
	Recovery *DeviceRecovery `json:"recovery,omitempty"`
	// AckedRevision is the desired revision the device had acknowledged
	// to the session server that took the report (0: not said). Like the
	// session record's, the stored value never goes backwards; applied
	// once the active level is LevelAckWithStatus.
	AckedRevision uint64 `json:"acked_revision,omitempty"`
}

// StatusBatchRequest carries transitions of many devices in one entry.
type StatusBatchRequest struct {
	Owner       string             `json:"owner"`
	Transitions []StatusTransition `json:"transitions"`
}

// decodeCommand decodes the JSON body of the commands replicas apply
// most (status batches, device sessions and their batches, intents),
// with the decoder of github.com/go-json-experiment/json in the semantics
// of encoding/json (jsonv1.DefaultOptionsV1): about twice as fast on a
// status batch, and decoding was half of applying one
// (BenchmarkApplyStatusBatch). The semantics must stay those of
// encoding/json: replicas of earlier releases decode the same entries with
// it, and every replica must store the same state (FuzzCommandDecode
// compares the two decoders on arbitrary bodies).
func decodeCommand(body []byte, v any) error {
	return jsonv2.Unmarshal(body, v, jsonv1.DefaultOptionsV1())
}

// Encode returns the Raft log payload for a command: the type byte followed
// by the JSON encoding of req.
func Encode(t MessageType, req any) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode %s command: %w", t, err)
	}
	buf := make([]byte, 0, len(body)+1)
	buf = append(buf, byte(t))
	return append(buf, body...), nil
}

// ApplyResult is what Apply returns for each command; the Raft apply future
// of the proposing server carries it back to the caller.
type ApplyResult struct {
	// Revision is the revision the command created, or the current
	// revision if the command was rejected.
	Revision uint64
	// Err is non-nil if the command was rejected. It is deterministic:
	// every replica rejects the same command the same way.
	Err error
	// Labels are the labels a use-enroll-token command assigned.
	Labels map[string]string
	// Unchanged says a put-intent changed nothing: the document equals
	// the current revision's, which Revision then is.
	Unchanged bool
}

var (
	// ErrOlderSnapshot is returned by Restore for a snapshot older than
	// the state it would replace, which it keeps.
	ErrOlderSnapshot = errors.New("snapshot older than the state")
	// ErrNotFound is returned for an intent or device that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrCompacted is returned when a historical revision is no longer
	// retained.
	ErrCompacted = errors.New("revision compacted")
)

// ConflictError is returned when a conditional write's If-Match revision
// does not match the current one.
type ConflictError struct {
	Name     string
	Expected uint64
	// Current is the intent's current revision; zero if it does not exist.
	Current uint64
}

func (e *ConflictError) Error() string {
	if e.Current == 0 {
		return fmt.Sprintf("intent %q: expected revision %d but the intent does not exist", e.Name, e.Expected)
	}
	if e.Expected == 0 {
		return fmt.Sprintf("intent %q: expected the intent not to exist but it is at revision %d", e.Name, e.Current)
	}
	return fmt.Sprintf("intent %q: expected revision %d but the current revision is %d", e.Name, e.Expected, e.Current)
}
