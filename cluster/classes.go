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

// Reconcile classes as replicated configuration (fsm/class.go): the API
// lists the classes in effect and writes and deletes classes through
// Raft; every part of a server that needs them reads them from its
// replica (effectiveClasses), so a change reaches the status owners and
// the agents' sessions as the replica applies it.

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
	written := map[string]*fsm.ClassRecord{}
	for _, rec := range recs {
		written[rec.Name] = rec
	}
	eff := h.cfg.effectiveClasses(read)
	out := api.ClassList{Classes: make([]api.Class, 0, len(eff))}
	for _, name := range slices.Sorted(maps.Keys(eff)) {
		c := api.ClassOf(eff[name])
		c.Source = api.ClassBuiltin
		if rec, ok := written[name]; ok {
			t := time.Unix(0, rec.Time).UTC()
			c.Source, c.Actor, c.UpdatedAt, c.Index = api.ClassWritten, rec.Actor.String(), &t, rec.ModifyIndex
		}
		out.Classes = append(out.Classes, c)
	}
	writeJSON(w, http.StatusOK, out)
}

// handlePutClass writes a class (PUT /v1/classes/{name}).
func (h *httpAPI) handlePutClass(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	body, e := readBody(w, r, maxBodyBytes, "class")
	if e != nil {
		writeError(w, e)
		return
	}
	var in api.Class
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, badRequest("class: %v", err))
		return
	}
	if in.Name == "" {
		in.Name = name
	}
	if in.Name != name {
		writeError(w, badRequest("class %q sent to /v1/classes/%s: the names differ", in.Name, name))
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
	_, index, ok := h.commit(w, r.Context(), fsm.PutClassType, cmd)
	if !ok {
		return
	}
	out := api.ClassOf(class)
	t := now.UTC()
	out.Source, out.Actor, out.UpdatedAt, out.Index = api.ClassWritten, cmd.Actor.String(), &t, index
	writeJSON(w, http.StatusOK, out)
}

// handleDeleteClass deletes a written class (DELETE /v1/classes/{name}).
func (h *httpAPI) handleDeleteClass(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	cmd := &fsm.PutClassRequest{Delete: name, Actor: principalOf(r.Context()).actor(), Time: h.clock.Now().UnixNano()}
	if _, _, ok := h.commit(w, r.Context(), fsm.PutClassType, cmd); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
}
