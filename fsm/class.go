package fsm

import (
	"encoding/json"
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// Reconcile classes are replicated configuration: an operator writes a
// class (meteor class apply), every server judges devices by it, and the
// agents connected to any server reconcile on its cadence. The classes in
// effect are a server's built-in set (cluster.Config.Classes) with the
// committed ones in place of the built-in of the same name
// (EffectiveClasses). Deleting a committed class of a built-in name
// brings the built-in back.

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

func (f *FSM) applyPutClass(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req PutClassRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if req.Delete != "" {
		raw, err := txn.First(tableClasses, "id", req.Delete)
		if err != nil {
			return ApplyResult{}, err
		}
		if raw == nil {
			return rejected(txn, fmt.Errorf("delete class %q: %w (only classes written with meteor class apply can be deleted)", req.Delete, ErrNotFound))
		}
		if err := txn.Delete(tableClasses, raw); err != nil {
			return ApplyResult{}, err
		}
		f.emit(index, Event{Kind: KindConfig, Action: "class-deleted", Time: req.Time, Message: "class " + req.Delete, Actor: req.Actor.String()})
		return f.audited(txn, index, req.Time, req.Actor, "delete-class", "class/"+req.Delete, "")
	}
	if req.Class == nil {
		return rejected(txn, fmt.Errorf("put class: no class in request"))
	}
	// Proposers validate; validating again keeps an old or buggy one from
	// storing what agents cannot use. The rules are pure.
	if err := req.Class.ValidateWritten(); err != nil {
		return rejected(txn, err)
	}
	rec := &ClassRecord{Name: req.Class.Name, Class: *req.Class, Actor: req.Actor, Time: req.Time, CreateIndex: index, ModifyIndex: index}
	raw, err := txn.First(tableClasses, "id", req.Class.Name)
	if err != nil {
		return ApplyResult{}, err
	}
	if raw != nil {
		cur := raw.(*ClassRecord)
		if cur.Class == *req.Class {
			return ApplyResult{Revision: metaValue(txn, metaRevision), Unchanged: true}, nil
		}
		rec.CreateIndex = cur.CreateIndex
	} else if n, err := countTable(txn, tableClasses); err != nil {
		return ApplyResult{}, err
	} else if n >= intent.MaxClasses {
		return rejected(txn, fmt.Errorf("put class %q: the cluster has %d classes, the most it keeps", req.Class.Name, n))
	}
	if err := txn.Insert(tableClasses, rec); err != nil {
		return ApplyResult{}, err
	}
	f.emit(index, Event{Kind: KindConfig, Action: "class-put", Time: req.Time, Message: "class " + req.Class.Name, Actor: req.Actor.String()})
	return f.audited(txn, index, req.Time, req.Actor, "put-class", "class/"+req.Class.Name, classSummary(req.Class))
}

func classSummary(c *intent.Class) string {
	return fmt.Sprintf("pull %v, probe %v, report %v, retry %v..%v (jitter %g), unreachable after %v, progress deadline %v",
		c.PullInterval, c.ProbeInterval, c.ReportInterval, c.RetryBase, c.RetryMax, c.RetryJitter, c.UnreachableAfter, c.ProgressDeadline)
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
// ones builtin lacks), and the index of the newest committed change
// (0 if none).
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
