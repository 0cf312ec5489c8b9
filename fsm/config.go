package fsm

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// Cluster configuration operators write: reconcile classes and
// maintenance windows. Every server judges devices by it, and the agents
// connected to any server get it in their sessions' settings. The classes
// in effect are a server's built-in set (cluster.Config.Classes) with the
// committed ones in place of the built-in of the same name
// (EffectiveClasses); deleting a committed class of a built-in name brings
// the built-in back. Maintenance windows are only what is committed.

// ClassRecord is a committed class.
type ClassRecord struct {
	// Name is Class.Name, the table's key.
	Name  string       `json:"name"`
	Class intent.Class `json:"class"`
	// Actor wrote it, at Time (proposer's clock, Unix ns) and Raft index
	// ModifyIndex.
	Actor       Actor  `json:"actor,omitzero"`
	Time        int64  `json:"time"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// PutClassRequest creates or replaces a class, or deletes one (Delete
// names it; Class is then nil).
type PutClassRequest struct {
	Class  *intent.Class `json:"class,omitempty"`
	Delete string        `json:"delete,omitempty"`
	Actor  Actor         `json:"actor,omitzero"`
	Time   int64         `json:"time"`
}

// WindowRecord is a committed maintenance window.
type WindowRecord struct {
	// Name is Window.Name, the table's key.
	Name        string                   `json:"name"`
	Window      intent.MaintenanceWindow `json:"window"`
	Actor       Actor                    `json:"actor,omitzero"`
	Time        int64                    `json:"time"`
	CreateIndex uint64                   `json:"create_index"`
	ModifyIndex uint64                   `json:"modify_index"`
}

// PutWindowRequest creates or replaces a maintenance window, or deletes
// one (Delete names it; Window is then nil).
type PutWindowRequest struct {
	Window *intent.MaintenanceWindow `json:"window,omitempty"`
	Delete string                    `json:"delete,omitempty"`
	Actor  Actor                     `json:"actor,omitzero"`
	Time   int64                     `json:"time"`
}

// configChange is one write of configuration: put record (named name)
// into table, or delete name from it.
type configChange struct {
	table, kind string // "classes", "class"
	name        string
	delete      bool
	// record is what a put inserts; same says whether a stored record
	// says the same, and setCreate gives record the stored one's create
	// index.
	record    any
	same      func(stored any) bool
	setCreate func(stored any)
	limit     int
	summary   string
	actor     Actor
	time      int64
}

// putConfig applies a configuration write: audited, and sent as a config
// event.
func (f *FSM) putConfig(txn *memdb.Txn, index uint64, c configChange) (ApplyResult, error) {
	raw, err := txn.First(c.table, "id", c.name)
	if err != nil {
		return ApplyResult{}, err
	}
	action := "put-" + c.kind
	if c.delete {
		if raw == nil {
			return rejected(txn, fmt.Errorf("delete %s %q: %w", c.kind, c.name, ErrNotFound))
		}
		if err := txn.Delete(c.table, raw); err != nil {
			return ApplyResult{}, err
		}
		action = "delete-" + c.kind
	} else {
		switch {
		case raw != nil && c.same(raw):
			return ApplyResult{Revision: metaValue(txn, metaRevision), Unchanged: true}, nil
		case raw != nil:
			c.setCreate(raw)
		default:
			n, err := countTable(txn, c.table)
			if err != nil {
				return ApplyResult{}, err
			}
			if n >= c.limit {
				return rejected(txn, fmt.Errorf("put %s %q: the cluster has %d, the most it keeps", c.kind, c.name, n))
			}
		}
		if err := txn.Insert(c.table, c.record); err != nil {
			return ApplyResult{}, err
		}
	}
	f.emit(index, Event{Kind: KindConfig, Action: action, Time: c.time, Message: c.kind + " " + c.name, Actor: c.actor.String()})
	return f.audited(txn, index, c.time, c.actor, action, c.kind+"/"+c.name, c.summary)
}

func (f *FSM) applyPutClass(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req PutClassRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	c := configChange{table: tableClasses, kind: "class", name: req.Delete, delete: req.Delete != "", actor: req.Actor, time: req.Time, limit: intent.MaxClasses}
	if !c.delete {
		if req.Class == nil {
			return rejected(txn, fmt.Errorf("put class: no class in request"))
		}
		// Proposers validate; validating again keeps an old or buggy one
		// from storing what agents cannot use. The rules are pure.
		if err := req.Class.ValidateWritten(); err != nil {
			return rejected(txn, err)
		}
		rec := &ClassRecord{Name: req.Class.Name, Class: *req.Class, Actor: req.Actor, Time: req.Time, CreateIndex: index, ModifyIndex: index}
		c.name, c.record, c.summary = rec.Name, rec, classSummary(req.Class)
		c.same = func(stored any) bool { return stored.(*ClassRecord).Class == rec.Class }
		c.setCreate = func(stored any) { rec.CreateIndex = stored.(*ClassRecord).CreateIndex }
	}
	return f.putConfig(txn, index, c)
}

func (f *FSM) applyPutWindow(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req PutWindowRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	c := configChange{table: tableWindows, kind: "maintenance-window", name: req.Delete, delete: req.Delete != "", actor: req.Actor, time: req.Time, limit: intent.MaxWindows}
	if !c.delete {
		if req.Window == nil {
			return rejected(txn, fmt.Errorf("put maintenance window: no window in request"))
		}
		if err := req.Window.Validate(); err != nil {
			return rejected(txn, err)
		}
		rec := &WindowRecord{Name: req.Window.Name, Window: *req.Window, Actor: req.Actor, Time: req.Time, CreateIndex: index, ModifyIndex: index}
		c.name, c.record, c.summary = rec.Name, rec, windowSummary(req.Window)
		c.same = func(stored any) bool { return sameWindow(&stored.(*WindowRecord).Window, &rec.Window) }
		c.setCreate = func(stored any) { rec.CreateIndex = stored.(*WindowRecord).CreateIndex }
	}
	return f.putConfig(txn, index, c)
}

func classSummary(c *intent.Class) string {
	return fmt.Sprintf("pull %v, probe %v, report %v, retry %v..%v (jitter %g), unreachable after %v, progress deadline %v",
		c.PullInterval, c.ProbeInterval, c.ReportInterval, c.RetryBase, c.RetryMax, c.RetryJitter, c.UnreachableAfter, c.ProgressDeadline)
}

func windowSummary(w *intent.MaintenanceWindow) string {
	spans := make([]string, len(w.Spans))
	for i, s := range w.Spans {
		spans[i] = s.String()
	}
	return fmt.Sprintf("selector %v, %v local time", w.Selector, spans)
}

func sameWindow(a, b *intent.MaintenanceWindow) bool {
	if a.Name != b.Name || a.Description != b.Description || !slices.Equal(a.Spans, b.Spans) || len(a.Selector) != len(b.Selector) {
		return false
	}
	for k, v := range a.Selector {
		if w, ok := b.Selector[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// countTable counts the records of a table.
func countTable(txn *memdb.Txn, table string) (int, error) {
	it, err := txn.Get(table, "id")
	if err != nil {
		return 0, err
	}
	n := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	return n, nil
}

// Classes lists the committed classes, ordered by name.
func (r *Read) Classes(ws memdb.WatchSet) ([]*ClassRecord, error) {
	return readAll[*ClassRecord](r, ws, tableClasses)
}

// EffectiveClasses returns the classes in effect: builtin with the
// committed classes in place of those of the same name (and the committed
// ones builtin lacks).
func (r *Read) EffectiveClasses(ws memdb.WatchSet, builtin map[string]intent.Class) (map[string]intent.Class, error) {
	recs, err := r.Classes(ws)
	if err != nil {
		return nil, err
	}
	out := make(map[string]intent.Class, len(builtin)+len(recs))
	for k, v := range builtin {
		out[k] = v
	}
	for _, rec := range recs {
		out[rec.Class.Name] = rec.Class
	}
	return out, nil
}

// Windows lists the committed maintenance windows, ordered by name.
func (r *Read) Windows(ws memdb.WatchSet) ([]*WindowRecord, error) {
	return readAll[*WindowRecord](r, ws, tableWindows)
}
