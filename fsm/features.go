package fsm

import "fmt"

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
//	   (put-maintenance-window, 18) and lock breaks (device-unlock, 19)
//
// A release that adds a command type or changes what Apply or Restore
// understand raises the level by one and lists what it added here and in
// commandLevels.
const FeatureLevel uint16 = 3

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
}

// Level returns the feature level that introduced command type t (its
// IgnoreUnknownTypeFlag bit aside), or 0 for a type this code does not
// know.
func (t MessageType) Level() uint16 { return commandLevels[t&^IgnoreUnknownTypeFlag] }

// snapshotVersionFor is the newest snapshot version a replica of the given
// feature level reads.
func snapshotVersionFor(level uint16) int {
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
