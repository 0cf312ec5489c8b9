package fsm

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/go-memdb"
)

// Actor is who proposed an operator command: the accessor and name of the
// token the API verified. The zero Actor is Meteor itself (a command a
// server proposes on its own, or one an older caller proposed without an
// actor); audit records show it as "system".
type Actor struct {
	Accessor string `json:"accessor,omitempty"`
	Name     string `json:"name,omitempty"`
}

// IsSystem reports whether a is the zero Actor.
func (a Actor) IsSystem() bool { return a == Actor{} }

func (a Actor) String() string {
	switch {
	case a.IsSystem():
		return "system"
	case a.Name == "":
		return a.Accessor
	}
	return a.Name + " (" + a.Accessor + ")"
}

// AuditRecord is one operator change, appended by the command that made it
// in the same apply. Only changes that succeeded are recorded: a rejected
// command changes no state, the audit log included (the server that
// refused a request logs the refusal).
type AuditRecord struct {
	// Index is the Raft index of the command, and the record's key.
	Index uint64 `json:"index"`
	// Time is the proposer's clock (Unix nanoseconds).
	Time  int64 `json:"time"`
	Actor Actor `json:"actor,omitzero"`
	// Action names the change (put-intent, delete-intent, create-token,
	// revoke-token, enroll-device, set-device-labels, revoke-device,
	// unrevoke-device, member-<change>, and the operations of
	// OperationRequest: snapshot-save, snapshot-restore).
	Action string `json:"action"`
	// Target is what was changed, as kind/name: intent/NAME,
	// token/ACCESSOR, device/ID, member/ID or snapshot/SHA256.
	Target string `json:"target"`
	// Summary says what the change did, for people.
	Summary string `json:"summary,omitempty"`
	// Revision is the cluster revision after the change.
	Revision uint64 `json:"revision"`
}

// MemberChangeRequest records in the audit log a change of cluster
// membership that an operator asked for. Membership itself lives in Raft's
// configuration, not in this state: the server that made the change
// proposes this command once the change is done (or failed).
type MemberChangeRequest struct {
	// Change is what was done: add, remove, leave, promote, ...
	Change  string `json:"change"`
	Member  string `json:"member"`
	Address string `json:"address,omitempty"`
	// Outcome says how it ended ("ok", or the error).
	Outcome string `json:"outcome,omitempty"`
	Actor   Actor  `json:"actor,omitzero"`
	Time    int64  `json:"time"`
}

// AuditQuery selects audit records.
type AuditQuery struct {
	// Limit is the most records returned; zero means every retained one.
	Limit int
	// Actor keeps the records of the actor with this accessor or name
	// ("system" for the zero Actor).
	Actor string
	// Target keeps the records of this target (intent/web); one ending
	// in "/" (intent/) keeps every target of that kind.
	Target string
}

func (q AuditQuery) matches(r *AuditRecord) bool {
	if q.Actor != "" && q.Actor != r.Actor.Accessor && q.Actor != r.Actor.Name && (q.Actor != "system" || !r.Actor.IsSystem()) {
		return false
	}
	if q.Target != "" && q.Target != r.Target && (!strings.HasSuffix(q.Target, "/") || !strings.HasPrefix(r.Target, q.Target)) {
		return false
	}
	return true
}

// Audit returns audit records, newest first, as q selects.
func (r *Read) Audit(ws memdb.WatchSet, q AuditQuery) ([]*AuditRecord, error) {
	it, err := r.txn.GetReverse(tableAudit, "id")
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	r.watch(ws, it.WatchCh())
	var out []*AuditRecord
	for raw := it.Next(); raw != nil && (q.Limit <= 0 || len(out) < q.Limit); raw = it.Next() {
		if rec := raw.(*AuditRecord); q.matches(rec) {
			out = append(out, rec)
		}
	}
	return out, nil
}

// audit appends the record of a successful change at index. The oldest
// records beyond the audit limit are dropped when the batch of commands
// ends (trimAudit), not here: no command reads the audit log, so the
// state every batch leaves is the one trimming after each record would
// leave, and the log's index is only written while the batch applies.
// go-memdb resets a table index's set of nodes already copied in the
// transaction whenever the index is read, so reading the oldest record
// after each insert made every insert and delete copy its path of the
// tree again, the full 256-way node of consecutive Raft indexes among it:
// about 12 KB of garbage a record (BenchmarkApplyPutIntent).
func (f *FSM) audit(txn *memdb.Txn, index uint64, t int64, actor Actor, action, target, summary string) error {
	rec := &AuditRecord{
		Index: index, Time: t, Actor: actor, Action: action, Target: target, Summary: summary,
		Revision: metaValue(txn, metaRevision),
	}
	if err := txn.Insert(tableAudit, rec); err != nil {
		return fmt.Errorf("append audit record: %w", err)
	}
	return setMeta(txn, metaAuditCount, metaValue(txn, metaAuditCount)+1)
}

// trimAudit drops the oldest audit records beyond the audit limit. The
// apply runs it once a batch, after its last command: the records to drop
// are read first and deleted after, so that the index is read once.
func (f *FSM) trimAudit(txn *memdb.Txn) error {
	n := metaValue(txn, metaAuditCount)
	if n <= uint64(f.auditLimit) {
		return nil
	}
	it, err := txn.Get(tableAudit, "id")
	if err != nil {
		return fmt.Errorf("trim audit log: %w", err)
	}
	drop := make([]any, 0, n-uint64(f.auditLimit))
	for raw := it.Next(); raw != nil && uint64(len(drop)) < n-uint64(f.auditLimit); raw = it.Next() {
		drop = append(drop, raw)
	}
	for _, raw := range drop {
		if err := txn.Delete(tableAudit, raw); err != nil {
			return fmt.Errorf("trim audit log: %w", err)
		}
	}
	return setMeta(txn, metaAuditCount, n-uint64(len(drop)))
}

// audited records a successful change in the audit log (see audit) and
// returns its result.
func (f *FSM) audited(txn *memdb.Txn, index uint64, t int64, actor Actor, action, target, summary string) (ApplyResult, error) {
	if err := f.audit(txn, index, t, actor, action, target, summary); err != nil {
		return ApplyResult{}, err
	}
	return ApplyResult{Revision: metaValue(txn, metaRevision)}, nil
}

func (f *FSM) applyMemberChange(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req MemberChangeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if req.Change == "" || req.Member == "" {
		return rejected(txn, fmt.Errorf("audit member change: the change and the member are required"))
	}
	summary := req.Change + " " + req.Member
	if req.Address != "" {
		summary += " at " + req.Address
	}
	if req.Outcome != "" {
		summary += ": " + req.Outcome
	}
	return f.audited(txn, index, req.Time, req.Actor, "member-"+req.Change, "member/"+req.Member, summary)
}

// OperationRequest records in the audit log an operator's operation on the
// whole cluster that changes no other replicated state: a snapshot saved
// (a read of everything) or restored (which replaces the state outside
// the log, through Raft's restore: the record is committed afterwards, in
// the restored state). The server that did it proposes it once done.
type OperationRequest struct {
	// Action names the operation: snapshot-save, snapshot-restore.
	Action string `json:"action"`
	// Target is what it concerned, as kind/name (snapshot/SHA256).
	Target  string `json:"target"`
	Summary string `json:"summary,omitempty"`
	Actor   Actor  `json:"actor,omitzero"`
	Time    int64  `json:"time"`
}

// maxOperationName bounds an operation's action and target.
const maxOperationName = 256

func (f *FSM) applyOperation(txn *memdb.Txn, index uint64, body []byte) (ApplyResult, error) {
	var req OperationRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ApplyResult{}, fmt.Errorf("decode: %w", err)
	}
	if req.Action == "" || req.Target == "" || len(req.Action) > maxOperationName || len(req.Target) > maxOperationName {
		return rejected(txn, fmt.Errorf("audit operation: the action and the target are required, at most %d bytes each", maxOperationName))
	}
	return f.audited(txn, index, req.Time, req.Actor, req.Action, req.Target, req.Summary)
}
