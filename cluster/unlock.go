package cluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
)

// handleUnlockDevice orders a workload lock on a device broken (POST
// /v1/devices/{id}/unlock): the acquisition of the lock the device last
// reported, which the order names by its time, so that a lock taken again
// since is not broken. It runs on the leader, so a scoped token's scope is
// checked against the device's labels as every committed change left
// them.
func (h *httpAPI) handleUnlockDevice(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.UnlockDeviceRequest
	body, e := readBody(w, r, maxBodyBytes, "unlock request")
	if e != nil {
		writeError(w, e)
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, badRequest("unlock request: %v", err))
		return
	}
	if req.Lock == "" || req.Reason == "" || len(req.Reason) > 1024 {
		writeError(w, badRequest("unlock request: name the lock and give a reason (at most 1024 bytes): it is recorded"))
		return
	}
	read := h.state.Read()
	rec, err := read.Device(nil, id)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	if err := h.allowDevice(r, acl.ActionUnlockDevice, h.cfg.recordSelection(rec)); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	var held *fsm.DeviceLock
	for i := range rec.Locks {
		if rec.Locks[i].Name == req.Lock {
			held = &rec.Locks[i]
		}
	}
	if held == nil {
		writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict,
			Message: fmt.Sprintf("device %s reports no lock %q held (as of its last report, seq %d): nothing to break", id, req.Lock, rec.ReportSeq)})
		return
	}
	now := h.clock.Now()
	cmd := &fsm.DeviceUnlockRequest{ID: id, Lock: req.Lock, Since: held.Since, Reason: req.Reason, Actor: principalOf(r.Context()).actor(), Time: now.UnixNano()}
	_, index, ok := h.commit(w, r.Context(), fsm.DeviceUnlockType, cmd)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, unlockOrder(fsm.UnlockRecord{Index: index, Lock: cmd.Lock, Since: cmd.Since, Reason: cmd.Reason, Actor: cmd.Actor, Time: cmd.Time}))
}

// unlockOrder is an order as the API shows it.
func unlockOrder(u fsm.UnlockRecord) api.UnlockOrder {
	return api.UnlockOrder{Index: u.Index, Lock: u.Lock, Since: time.Unix(0, u.Since).UTC(), Reason: u.Reason, Actor: u.Actor.String(),
		Time: time.Unix(0, u.Time).UTC(), Outcome: u.Outcome, OutcomeAt: unixTime(u.OutcomeAt)}
}

// deviceLocks are a device's locks and orders as the API shows them.
func deviceLocks(rec *fsm.DeviceRecord, now time.Time) ([]api.DeviceLock, []api.UnlockOrder) {
	var locks []api.DeviceLock
	for _, l := range rec.Locks {
		dl := api.DeviceLock{Name: l.Name, Holder: l.Holder, Since: time.Unix(0, l.Since).UTC(), Stale: l.Stale(now), Source: l.Source}
		if l.MaxHold > 0 {
			dl.MaxHold = l.MaxHold.String()
		}
		locks = append(locks, dl)
	}
	var orders []api.UnlockOrder
	for _, u := range rec.Unlocks {
		orders = append(orders, unlockOrder(u))
	}
	return locks, orders
}
