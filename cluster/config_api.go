package cluster

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/scheduler"
)

// Reconcile classes and maintenance windows as replicated configuration
// (fsm/config.go): the API lists them and writes and deletes them through
// Raft; every part of a server that needs them reads them from its
// replica (effectiveClasses, the sessions' settings), so a change reaches
// the status owners and the agents' sessions as the replica applies it.

// effectiveClasses returns the classes in effect as of read: the
// server's built-in set (Config.Classes) with the written ones in place.
// A replica that cannot be read leaves the built-in set.
func (c *Config) effectiveClasses(read *fsm.Read) scheduler.Classes {
	eff, err := read.EffectiveClasses(nil, c.Classes)
	if err != nil {
		return c.Classes
	}
	return eff
}

// handleListClasses answers GET /v1/classes.
func (h *httpAPI) handleListClasses(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	recs, err := read.Classes(nil)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	byName := map[string]*fsm.ClassRecord{}
	for _, rec := range recs {
		byName[rec.Name] = rec
	}
	eff := h.cfg.effectiveClasses(read)
	out := api.ClassList{Classes: make([]api.Class, 0, len(eff))}
	for _, name := range slices.Sorted(maps.Keys(eff)) {
		c := api.ClassOf(eff[name])
		c.Source = api.ClassBuiltin
		if rec, ok := byName[name]; ok {
			c.Source = api.ClassWritten
			c.Actor, c.UpdatedAt, c.Index = written(rec.Actor, time.Unix(0, rec.Time), rec.ModifyIndex)
		}
		out.Classes = append(out.Classes, c)
	}
	writeJSON(w, http.StatusOK, out)
}

// readConfigBody decodes the body of a PUT of a configuration object
// named name in its path (what names its kind); it answers the request
// and returns false if it cannot.
func readConfigBody[T any](w http.ResponseWriter, r *http.Request, what string, nameOf func(*T) *string) (T, bool) {
	var in T
	body, e := readBody(w, r, maxBodyBytes, what)
	if e != nil {
		writeError(w, e)
		return in, false
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, badRequest("%s: %v", what, err))
		return in, false
	}
	name := r.PathValue("name")
	if p := nameOf(&in); *p == "" {
		*p = name
	} else if *p != name {
		writeError(w, badRequest("%s %q sent to %s: the names differ", what, *p, r.URL.Path))
		return in, false
	}
	return in, true
}

// commitConfig commits a configuration write of the request's principal;
// it answers the request and returns false if it fails.
func (h *httpAPI) commitConfig(w http.ResponseWriter, r *http.Request, t fsm.MessageType, cmd any) (index uint64, ok bool) {
	_, index, ok = h.commit(w, r.Context(), t, cmd)
	return index, ok
}

// written fills the fields of a written configuration object.
func written(actor fsm.Actor, at time.Time, index uint64) (string, *time.Time, uint64) {
	t := at.UTC()
	return actor.String(), &t, index
}

// handlePutClass writes a class (PUT /v1/classes/{name}).
func (h *httpAPI) handlePutClass(w http.ResponseWriter, r *http.Request) {
	in, ok := readConfigBody(w, r, "class", func(c *api.Class) *string { return &c.Name })
	if !ok {
		return
	}
	class, err := in.Intent()
	if err == nil {
		err = class.ValidateWritten()
	}
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	now := h.clock.Now()
	cmd := &fsm.PutClassRequest{Class: &class, Actor: principalOf(r.Context()).actor(), Time: now.UnixNano()}
	index, ok := h.commitConfig(w, r, fsm.PutClassType, cmd)
	if !ok {
		return
	}
	out := api.ClassOf(class)
	out.Source = api.ClassWritten
	out.Actor, out.UpdatedAt, out.Index = written(cmd.Actor, now, index)
	writeJSON(w, http.StatusOK, out)
}

// handleDeleteClass deletes a written class (DELETE /v1/classes/{name}).
func (h *httpAPI) handleDeleteClass(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	cmd := &fsm.PutClassRequest{Delete: name, Actor: principalOf(r.Context()).actor(), Time: h.clock.Now().UnixNano()}
	if _, ok := h.commitConfig(w, r, fsm.PutClassType, cmd); ok {
		writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
	}
}

// handleListWindows answers GET /v1/maintenance-windows.
func (h *httpAPI) handleListWindows(w http.ResponseWriter, r *http.Request) {
	read := h.state.Read()
	h.setReadHeaders(w, read)
	recs, err := read.Windows(nil)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	out := api.MaintenanceWindowList{Windows: make([]api.MaintenanceWindow, 0, len(recs))}
	for _, rec := range recs {
		mw := api.WindowOf(rec.Window)
		mw.Actor, mw.UpdatedAt, mw.Index = written(rec.Actor, time.Unix(0, rec.Time), rec.ModifyIndex)
		out.Windows = append(out.Windows, mw)
	}
	writeJSON(w, http.StatusOK, out)
}

// handlePutWindow writes a maintenance window (PUT
// /v1/maintenance-windows/{name}).
func (h *httpAPI) handlePutWindow(w http.ResponseWriter, r *http.Request) {
	in, ok := readConfigBody(w, r, "maintenance window", func(mw *api.MaintenanceWindow) *string { return &mw.Name })
	if !ok {
		return
	}
	mw, err := in.Intent()
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	now := h.clock.Now()
	cmd := &fsm.PutWindowRequest{Window: &mw, Actor: principalOf(r.Context()).actor(), Time: now.UnixNano()}
	index, ok := h.commitConfig(w, r, fsm.PutWindowType, cmd)
	if !ok {
		return
	}
	out := api.WindowOf(mw)
	out.Actor, out.UpdatedAt, out.Index = written(cmd.Actor, now, index)
	writeJSON(w, http.StatusOK, out)
}

// handleDeleteWindow deletes a maintenance window.
func (h *httpAPI) handleDeleteWindow(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	cmd := &fsm.PutWindowRequest{Delete: name, Actor: principalOf(r.Context()).actor(), Time: h.clock.Now().UnixNano()}
	if _, ok := h.commitConfig(w, r, fsm.PutWindowType, cmd); ok {
		writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
	}
}
