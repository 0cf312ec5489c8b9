package fsm

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// FeatureLevel is the feature level of this code's state machine: it
// applies every command type, and reads every snapshot, introduced at this
// level or below. A server of a cluster advertises the level it runs, and
// the leader proposes a command only once every server supports the
// command's level (package cluster holds it back until then): a server
// that does not know a command type stops rather than skip it (Apply), so
// during a rolling upgrade a new type must wait for the last server.
//
// The levels:
//
//	1  commands 1-16; snapshots of version 1 (every release up to 0.1.0)
//	2  operator restores of a backup (snapshots of version 2, which carry
//	   the restore the state descends from); the audit-operation command (20)
//	3  reconcile classes (put-class, 17), maintenance windows
//	   (put-maintenance-window, 18) and lock breaks (device-unlock, 19);
//	   the active level (set-feature-level, 21; snapshots of version 3
//	   carry it) and, once it is 3, the edge data existing commands
//	   record (LevelEdge)
//	4  once it is active, a status transition records the revision the
//	   device acknowledged (StatusTransition.AckedRevision,
//	   LevelAckWithStatus)
//
// A release that adds a command type or changes what Apply or Restore
// understand raises the level by one and lists what it added here and in
// commandLevels.
const FeatureLevel uint16 = 4

// LevelOperatorRestore is the level from which replicas order states by
// the operator restore they descend from (RestoreMark, snapshot version
// 2), which an operator restore of an older backup relies on: a replica
// of level 1 would keep its newer state and say the restore succeeded.
const LevelOperatorRestore uint16 = 2

// commandLevels says from which feature level on each command type is
// understood. Every type with a handler is listed (a test checks); a new
// type takes the level of the release that adds it.
var commandLevels = map[MessageType]uint16{
	PutIntentType:          1,
	DeleteIntentType:       1,
	UpsertDeviceType:       1,
	DeviceSessionType:      1,
	StatusBatchType:        1,
	DeviceSessionBatchType: 1,
	CreateTokenType:        1,
	RevokeTokenType:        1,
	UseEnrollTokenType:     1,
	SetDeviceLabelsType:    1,
	RevokeDeviceType:       1,
	UnrevokeDeviceType:     1,
	AuditMemberChangeType:  1,
	RolloutStepType:        1,
	RolloutControlType:     1,
	AuditOperationType:     2,
	PutClassType:           3,
	PutWindowType:          3,
	DeviceUnlockType:       3,
	SetFeatureLevelType:    3,
}

// Level returns the feature level that introduced command type t (its
// IgnoreUnknownTypeFlag bit aside), or 0 for a type this code does not
// know.
func (t MessageType) Level() uint16 { return commandLevels[t&^IgnoreUnknownTypeFlag] }

// snapshotVersionFor is the newest snapshot version a replica of the given
// feature level reads.
func snapshotVersionFor(level uint16) int {
	if level >= LevelEdge {
		return 3
	}
	if level >= LevelOperatorRestore {
		return 2
	}
	return 1
}

func checkFeatureLevel(level uint16) error {
	if level > FeatureLevel {
		return fmt.Errorf("feature level %d: this code implements up to %d", level, FeatureLevel)
	}
	return nil
}

// LevelEdge is the level of the edge-safety features: reconcile classes,
// maintenance windows, lock breaks (their commands), and what existing
// commands record for them (a device's link history, the holds, locks and
// recovery a report brings, intents with rotation windows, disruptive
// resources, preconditions or maintenance rollout windows).
const LevelEdge uint16 = 3

// LevelAckWithStatus is the level from which a status transition records
// the desired revision the device acknowledged
// (StatusTransition.AckedRevision): the owner commits a device's Ack with
// the report that follows it, in one entry, instead of the session server
// committing it in a session record first. A replica of level 3 would
// drop the field and store another acknowledged revision.
const LevelAckWithStatus uint16 = 4

// The active level. New command types are held back until every server
// runs their level, but a release may also apply existing commands
// differently (record a new field, derive new data). Replicas of two
// releases would then store different states from the same log during a
// rolling upgrade, and diverge. So such changes follow the cluster's
// active level, which the log itself raises (set-feature-level, proposed
// by the leader once every server runs the level): a replica applies the
// behaviour of a level only from the entry that raised it on, so every
// replica, old or new, applies every entry alike.

// metaActiveLevel is the active feature level; 0 (a state from before the
// field) counts as LevelOperatorRestore, the highest level whose
// behaviour did not depend on it.
const metaActiveLevel = "feature_level"

// activeLevel is the state's active feature level.
func activeLevel(txn *memdb.Txn) uint16 {
	if v := metaValue(txn, metaActiveLevel); v > 0 {
		return uint16(v)
	}
	return LevelOperatorRestore
}

// ActiveLevel is the cluster's active feature level as this replica has
// applied it.
func (r *Read) ActiveLevel() uint16 { return activeLevel(r.txn) }

// SetFeatureLevelRequest raises the cluster's active feature level.
type SetFeatureLevelRequest struct {
	Level uint16 `json:"level"`
	Time  int64  `json:"time"`
}

func (f *FSM) applySetFeatureLevel(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req SetFeatureLevelRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	switch {
	case req.Level > f.level:
		// Proposed only once every server runs the level; a replica
		// below it must stop rather than pretend (as for an unknown
		// command type).
		return ApplyResult{}, fmt.Errorf("feature level %d: this server runs level %d", req.Level, f.level)
	case req.Level <= activeLevel(txn):
		return rejected(txn, fmt.Errorf("feature level %d is active already (%d)", req.Level, activeLevel(txn)))
	}
	if err := setMeta(txn, metaActiveLevel, uint64(req.Level)); err != nil {
		return ApplyResult{}, err
	}
	return ApplyResult{Revision: metaValue(txn, metaRevision)}, nil
}

// IntentLevel returns the feature level an intent needs, and the first
// thing in it that needs that level ("" at level 1): a replica of an
// earlier release would drop it and store another intent.
func IntentLevel(in *intent.Intent) (uint16, string) {
	if w, _ := in.Rollout["window"].(string); w == "maintenance" {
		return LevelEdge, "rollout window: maintenance"
	}
	for _, r := range in.Resources {
		switch {
		case r.Rotation != nil:
			return LevelEdge, fmt.Sprintf("resource %s: rotation", r.ID)
		case r.Disruptive:
			return LevelEdge, fmt.Sprintf("resource %s: disruptive", r.ID)
		}
		for _, q := range r.Requires {
			if strings.Contains(q, ":") {
				return LevelEdge, fmt.Sprintf("resource %s: requires %s", r.ID, q)
			}
		}
	}
	return 1, ""
}

// FeatureLevelError refuses what needs a feature level the cluster has
// not made active yet (every server must run it first).
type FeatureLevelError struct {
	What          string
	Level, Active uint16
}

func (e *FeatureLevelError) Error() string {
	return fmt.Sprintf("%s needs feature level %d, and the cluster runs level %d until every server runs %d (docs/operations.md, \"Upgrading\")",
		e.What, e.Level, e.Active, e.Level)
}
