package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
)

// CarryOptions tune CarrySecurity.
type CarryOptions struct {
	// BackupTokens brings the backup's tokens back as the backup holds
	// them, whatever became of them since (the operator's
	// --restore-credentials). Revocations of devices are merged anyway.
	BackupTokens bool
}

// CarryResult says what CarrySecurity changed in a backup's state.
type CarryResult struct {
	// Descends says the replaced state descends from the backup's
	// history (the same cluster, past the backup), Basis why or why not.
	Descends bool
	Basis    string
	// KeptRevoked are the devices revoked in the replaced state and not
	// in the backup, which the restored state holds revoked.
	KeptRevoked []string
	// TokensNotRestored are the accessors of the backup's tokens that
	// the replaced state no longer holds (revoked since), left out of the
	// restored state. Only when Descends and not CarryOptions.BackupTokens.
	TokensNotRestored []string
	// TokenUsesKept are the accessors of the backup's enroll tokens that
	// enrolled devices since: the restored state keeps the replaced
	// state's record, uses counted. Only when TokensNotRestored could be.
	TokenUsesKept []string
}

// CarrySecurity brings into f, which holds a backup's state about to be
// restored over cur (an operator restore: package cluster, restoreLocked),
// what cur knows that makes the cluster stricter, so that restoring an
// older backup does not undo a revocation:
//
//   - every device revoked in cur stays revoked: f holds the union of
//     both states' revocations (an operator can unrevoke one);
//   - if cur descends from the backup's history (descendsFrom), a token
//     of the backup that cur does not hold was revoked since, and is left
//     out; a token both hold takes cur's record, whose enroll uses
//     counted on since. Into another cluster, or a new one, the backup's
//     tokens are restored as they are. Tokens created after the backup
//     are not carried: the restored state has the backup's credentials,
//     less those revoked since.
//
// f must not be in use otherwise: the leader runs it on its scratch
// replica before writing it as the restore's snapshot, so every replica
// installs the same state. The result is sorted by ID.
func (f *FSM) CarrySecurity(cur *Read, o CarryOptions) (*CarryResult, error) {
	db, _ := f.current()
	txn := db.Txn(true)
	defer txn.Abort()
	res := &CarryResult{}
	res.Descends, res.Basis = descendsFrom(txn, cur.txn)

	revoked, err := readAll[*RevokedDevice](cur, nil, tableRevoked)
	if err != nil {
		return nil, err
	}
	for _, rev := range revoked {
		have, err := txn.First(tableRevoked, "id", rev.ID)
		if err != nil {
			return nil, fmt.Errorf("carry revocation of %q: %w", rev.ID, err)
		}
		if have != nil {
			continue
		}
		if err := txn.Insert(tableRevoked, rev); err != nil {
			return nil, fmt.Errorf("carry revocation of %q: %w", rev.ID, err)
		}
		res.KeptRevoked = append(res.KeptRevoked, rev.ID)
	}

	if res.Descends && !o.BackupTokens {
		it, err := txn.Get(tableTokens, "id")
		if err != nil {
			return nil, fmt.Errorf("carry tokens: %w", err)
		}
		var backup []*TokenRecord
		for raw := it.Next(); raw != nil; raw = it.Next() {
			backup = append(backup, raw.(*TokenRecord))
		}
		for _, tok := range backup {
			raw, err := cur.txn.First(tableTokens, "id", tok.Accessor)
			if err != nil {
				return nil, fmt.Errorf("carry token %s: %w", tok.Accessor, err)
			}
			if raw == nil {
				if err := txn.Delete(tableTokens, tok); err != nil {
					return nil, fmt.Errorf("carry token %s: %w", tok.Accessor, err)
				}
				res.TokensNotRestored = append(res.TokensNotRestored, tok.Accessor)
				continue
			}
			now := raw.(*TokenRecord)
			if now.SecretHash != tok.SecretHash || now.CreateIndex != tok.CreateIndex || now.Uses <= tok.Uses {
				continue
			}
			if err := txn.Insert(tableTokens, now); err != nil {
				return nil, fmt.Errorf("carry token %s: %w", tok.Accessor, err)
			}
			res.TokenUsesKept = append(res.TokenUsesKept, tok.Accessor)
		}
	}
	txn.Commit()
	return res, nil
}

// descendsFrom reports whether the state cur descends from the history of
// backup: whether cur is the same cluster's state, later than the
// backup's. A token of the backup that cur lacks was then revoked since
// (nothing else deletes a token). It says so when
//
//   - cur is past the backup's index, and
//   - both descend from the same operator restore (RestoreMark: its ID is
//     random, so no other cluster has it), or cur holds the backup's
//     newest audit record as it is (keyed by Raft index, with the
//     proposer's time in nanoseconds: another cluster's record at that
//     index differs). Every change of a token is audited, so that record
//     is at or after the backup's last token change, and a state holding
//     it went through every change up to it. A restore keeps the
//     backup's audit log, so a state restored from this backup, or from
//     a later backup of the same cluster, holds it too.
//
// If cur's audit log no longer reaches back to that record (more changes
// than the audit limit since), cur is taken to descend: leaving a token
// out is the safe side, and --restore-credentials brings it back.
func descendsFrom(backup, cur *memdb.Txn) (bool, string) {
	bIndex, cIndex := metaValue(backup, metaIndex), metaValue(cur, metaIndex)
	if cIndex <= bIndex {
		return false, fmt.Sprintf("the replaced state (index %d) is not past the backup (index %d)", cIndex, bIndex)
	}
	if bm, cm := restoreMarkOf(backup), restoreMarkOf(cur); bm.Seq > 0 && bm == cm {
		return true, fmt.Sprintf("both descend from restore %s", bm)
	}
	newest, err := backup.Last(tableAudit, "id")
	if err != nil || newest == nil {
		return false, "the backup has no audit record to find in the replaced state"
	}
	rec := newest.(*AuditRecord)
	have, err := cur.First(tableAudit, "id", rec.Index)
	if err != nil {
		return false, fmt.Sprintf("read the replaced state's audit log: %v", err)
	}
	if have != nil {
		if *have.(*AuditRecord) == *rec {
			return true, fmt.Sprintf("the replaced state holds the backup's newest audit record (index %d)", rec.Index)
		}
		return false, fmt.Sprintf("the replaced state's audit record at index %d differs from the backup's: another cluster", rec.Index)
	}
	oldest, err := cur.First(tableAudit, "id")
	if err == nil && oldest != nil && oldest.(*AuditRecord).Index > rec.Index {
		return true, fmt.Sprintf("the replaced state's audit log starts at index %d, after the backup's newest record (index %d): taken as the same cluster", oldest.(*AuditRecord).Index, rec.Index)
	}
	return false, fmt.Sprintf("the replaced state has no audit record at index %d, the backup's newest: another cluster", rec.Index)
}
