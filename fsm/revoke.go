package fsm

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/go-memdb"
)

// ErrDeviceRevoked is returned for a revoked device's session or
// enrollment.
var ErrDeviceRevoked = errors.New("device revoked")

// RevokedDevice records that a device is refused: its sessions, its
// enrollment and its certificate. It is kept when the device's record is
// deleted, until an unrevoke.
type RevokedDevice struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
	Actor  Actor  `json:"actor,omitzero"`
	// Time is the proposer's time of the revocation, Index its Raft index.
	Time  int64  `json:"time"`
	Index uint64 `json:"index"`
}

// RevokeDeviceRequest revokes a device. The device need not be known: an
// identity can be revoked before it first connects.
type RevokeDeviceRequest struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
	Actor  Actor  `json:"actor,omitzero"`
	Time   int64  `json:"time"`
}

// UnrevokeDeviceRequest undoes a device's revocation.
type UnrevokeDeviceRequest struct {
	ID    string `json:"id"`
	Actor Actor  `json:"actor,omitzero"`
	Time  int64  `json:"time"`
}

func (f *FSM) applyRevokeDevice(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req RevokeDeviceRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if req.ID == "" {
		return rejected(txn, fmt.Errorf("revoke device: empty device ID"))
	}
	raw, err := txn.First(tableRevoked, "id", req.ID)
	if err != nil {
		return ApplyResult{}, err
	}
	if raw != nil {
		return rejected(txn, fmt.Errorf("revoke device %q: %w (at index %d)", req.ID, ErrDeviceRevoked, raw.(*RevokedDevice).Index))
	}
	rec := &RevokedDevice{ID: req.ID, Reason: req.Reason, Actor: req.Actor, Time: req.Time, Index: index}
	if err := txn.Insert(tableRevoked, rec); err != nil {
		return ApplyResult{}, err
	}
	f.emit(index, Event{Kind: KindDevice, Action: "revoked", Time: req.Time, Device: req.ID, Reason: req.Reason, Actor: req.Actor.String()})
	return f.audited(txn, index, req.Time, req.Actor, "revoke-device", "device/"+req.ID, req.Reason)
}

func (f *FSM) applyUnrevokeDevice(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req UnrevokeDeviceRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	raw, err := txn.First(tableRevoked, "id", req.ID)
	if err != nil {
		return ApplyResult{}, err
	}
	if raw == nil {
		return rejected(txn, fmt.Errorf("unrevoke device %q: no revocation: %w", req.ID, ErrNotFound))
	}
	if err := txn.Delete(tableRevoked, raw); err != nil {
		return ApplyResult{}, err
	}
	summary := fmt.Sprintf("revoked at index %d", raw.(*RevokedDevice).Index)
	f.emit(index, Event{Kind: KindDevice, Action: "unrevoked", Time: req.Time, Device: req.ID, Message: summary, Actor: req.Actor.String()})
	return f.audited(txn, index, req.Time, req.Actor, "unrevoke-device", "device/"+req.ID, summary)
}

// DeviceRevoked reports whether a device is revoked, with the revocation.
func (r *Read) DeviceRevoked(ws memdb.WatchSet, id string) (bool, *RevokedDevice, error) {
	ch, raw, err := r.txn.FirstWatch(tableRevoked, "id", id)
	if err != nil {
		return false, nil, fmt.Errorf("read revocation of %q: %w", id, err)
	}
	r.watch(ws, ch)
	if raw == nil {
		return false, nil, nil
	}
	return true, raw.(*RevokedDevice), nil
}

// RevokedDevices lists every revocation, ordered by device ID.
func (r *Read) RevokedDevices(ws memdb.WatchSet) ([]*RevokedDevice, error) {
	return readAll[*RevokedDevice](r, ws, tableRevoked)
}
