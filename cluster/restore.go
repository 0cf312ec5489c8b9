package cluster

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/snapshot"
	"github.com/meteor-edge/meteor/fsm"
)

// ErrRestoring refuses a proposal while the leader restores a snapshot:
// nothing was written, and the client may retry in a moment.
var ErrRestoring = errors.New("a snapshot restore is in progress on the leader")

// restoreConfirmWait bounds how long a restore waits, once a majority
// installed it, for the other servers of the configuration to confirm.
const restoreConfirmWait = 30 * time.Second

// RestoreOptions tune an operator restore (Server.RestoreSnapshot).
type RestoreOptions struct {
	// MinRevision, if set, is the least revision the restored state
	// takes (api.RestoreOptions).
	MinRevision uint64
	// Actor is who asked, for the audit log.
	Actor fsm.Actor
	// RestoreCredentials brings the backup's tokens back as the backup
	// holds them (api.RestoreOptions.RestoreCredentials).
	RestoreCredentials bool
}

// RestoreSnapshot restores a backup (package snapshot's file format, read
// from r) over the whole cluster. It runs on the leader, one at a time,
// and only once every server runs a feature level that orders states by
// their operator restore (fsm.LevelOperatorRestore).
//
// The file is checked in full before anything changes: its envelope's
// size and SHA-256, and the state itself, read into a scratch replica.
// Then the leader stops taking proposals (ErrRestoring), waits until it
// applied every entry it has, and hands Raft (Raft.Restore, as Consul's
// and Nomad's snapshot restores do) the backup's records as the state of
// a new operator restore: at the leader's last index or the backup's,
// whichever is higher (records are keyed and stamped by Raft index, the
// audit log's for one, and a restore into a younger cluster must not let
// later entries reuse the backup's indexes: Raft leaves a hole in its log
// up to it), with a revision
// above both the backup's and the replaced state's, and a new
// fsm.RestoreMark. Before that, the leader carries into the backup's state
// what the replaced state knows that makes the cluster stricter
// (fsm.FSM.CarrySecurity): the devices revoked since stay revoked, and
// over a later state of the same cluster the tokens revoked since stay
// revoked and enroll tokens keep the uses counted since. Replicas never
// merge on their own: they install the leader's bytes. Raft installs it on the leader and sends it to every
// follower as a snapshot, which each replica takes however far it had
// got (fsm.Restore), and returns once a majority holds it. The restore is
// recorded in the audit log of the restored state; RestoreSnapshot then
// waits up to restoreConfirmWait for the other servers to confirm.
//
// Raft's restore is a disaster-recovery tool: should the leader fail after
// installing the restore and before any follower took it, the leader
// elected next does not have it. Run the restore again then; the servers
// it missed take the new one (a RestoreMark with another ID).
func (s *Server) RestoreSnapshot(ctx context.Context, r io.Reader, o RestoreOptions) (*api.RestoreResult, error) {
	if !s.IsLeader() {
		return nil, ErrNotLeader
	}
	if err := s.requireFeature(fsm.LevelOperatorRestore, "snapshot restore"); err != nil {
		return nil, err
	}
	if !s.restoreMu.TryLock() {
		return nil, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: "another snapshot restore is in progress on this server: wait for it"}
	}
	defer s.restoreMu.Unlock()

	hdr, state, err := snapshot.Open(r)
	if err != nil {
		return nil, badRequest("snapshot refused, nothing changed: %v", err)
	}
	scratch, err := fsm.New(s.config.FSM)
	if err != nil {
		return nil, err
	}
	if err := scratch.Restore(state); err != nil {
		// A damaged file makes the state unreadable before its checksum
		// is reached: read the rest, and say the file is damaged if it is.
		if _, cerr := io.Copy(io.Discard, state); errors.Is(cerr, snapshot.ErrInvalid) {
			err = cerr
		}
		return nil, badRequest("snapshot refused, nothing changed: %v", err)
	}
	s.logger.Info("restoring snapshot", "index", hdr.Index, "revision", hdr.Revision, "sha256", hdr.SHA256, "bytes", hdr.Size, "taken_by", hdr.Server, "taken_at", hdr.TakenAt)

	restore, carried, err := s.restoreLocked(scratch, o)
	if err != nil {
		return nil, err
	}
	s.logger.Info("snapshot restored", "index", restore.Index, "revision", restore.Revision, "restore", restore.Mark.String(),
		"kept_revoked", len(carried.KeptRevoked), "tokens_not_restored", len(carried.TokensNotRestored), "token_uses_kept", len(carried.TokenUsesKept), "same_cluster", carried.Descends)

	res := &api.RestoreResult{
		Index: restore.Index, Revision: restore.Revision, BackupIndex: hdr.Index, BackupRevision: hdr.Revision,
		SHA256: hdr.SHA256, RestoreSeq: restore.Mark.Seq, RestoreID: restore.Mark.ID, Leader: s.config.NodeID,
		Carried: api.RestoreCarried{
			SameCluster: carried.Descends, Basis: carried.Basis, BackupCredentials: o.RestoreCredentials,
			KeptRevoked: carried.KeptRevoked, TokensNotRestored: carried.TokensNotRestored, TokenUsesKept: carried.TokenUsesKept,
		},
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.config.ApplyTimeout)
	_, _, err = applied(actx, s, fsm.AuditOperationType, &fsm.OperationRequest{
		Action: "snapshot-restore", Target: "snapshot/" + hdr.SHA256, Actor: o.Actor, Time: s.clock.Now().UnixNano(),
		Summary: fmt.Sprintf("restored the backup of index %d, revision %d (taken by %s at %s) as revision %d (restore %s); %s",
			hdr.Index, hdr.Revision, hdr.Server, hdr.TakenAt.UTC().Format(time.RFC3339), restore.Revision, restore.Mark, carrySummary(carried, o)),
	})
	cancel()
	if err != nil {
		s.logger.Error("record the snapshot restore in the audit log", "error", err)
	}
	s.confirmRestore(ctx, restore.Mark, res)
	return res, nil
}

// carrySummary says, for the audit log, what a restore carried from the
// state it replaced.
func carrySummary(c *fsm.CarryResult, o RestoreOptions) string {
	tokens := fmt.Sprintf("%d tokens revoked since left out, %d enroll tokens with their uses since", len(c.TokensNotRestored), len(c.TokenUsesKept))
	switch {
	case o.RestoreCredentials:
		tokens = "the backup's tokens as they were (restore credentials)"
	case !c.Descends:
		tokens = "the backup's tokens as they were (" + c.Basis + ")"
	}
	return fmt.Sprintf("kept %d device revocations made since; %s", len(c.KeptRevoked), tokens)
}

// restoreLocked hands scratch's state to Raft as a new operator restore,
// with proposals stopped, after carrying into it the security state of
// the state it replaces (fsm.FSM.CarrySecurity). It holds restoreMu.
func (s *Server) restoreLocked(scratch *fsm.FSM, o RestoreOptions) (*fsm.OperatorRestore, *fsm.CarryResult, error) {
	s.restoring.Store(true)
	defer s.restoring.Store(false)
	if err := s.raft.Barrier(s.config.ApplyTimeout).Error(); err != nil {
		return nil, nil, raftErr(err)
	}
	cur := s.fsm.Read()
	// Proposals are stopped and every entry applied: cur is the state
	// the restore replaces.
	carried, err := scratch.CarrySecurity(cur, fsm.CarryOptions{BackupTokens: o.RestoreCredentials})
	if err != nil {
		return nil, nil, fmt.Errorf("carry the replaced state's revocations: %w", err)
	}
	var id [8]byte
	crand.Read(id[:])
	restore := fsm.OperatorRestore{
		Index:    max(s.raft.LastIndex(), scratch.Read().Index()),
		Revision: max(max(cur.Revision(), scratch.Read().Revision())+1, o.MinRevision),
		Mark:     fsm.NewRestoreMark(cur.RestoreMark(), binary.BigEndian.Uint64(id[:])),
	}
	snap := scratch.Snapshot()
	var size countWriter
	if _, err := snap.WriteOperatorRestore(&size, restore); err != nil {
		return nil, nil, err
	}
	// Raft copies the snapshot from the pipe; the second pass writes the
	// same bytes (a snapshot's encoding is deterministic), and Raft
	// refuses a copy whose size differs before it touches the state.
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := snap.WriteOperatorRestore(pw, restore)
		pw.CloseWithError(err)
	}()
	err = s.raft.Restore(&raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: restore.Index, Size: size.n}, pr, s.config.ApplyTimeout)
	pr.CloseWithError(errors.New("restore over"))
	<-done
	if err != nil {
		return nil, nil, raftErr(fmt.Errorf("restore through raft: %w", err))
	}
	return &restore, carried, nil
}

// raftErr maps Raft's errors about leadership to the write path's.
func raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", ErrNotReady, err)
	}
	return err
}

// confirmRestore fills res.Servers: every server of the Raft
// configuration, with whether its replica holds restore mark, asked until
// all do or restoreConfirmWait passes.
func (s *Server) confirmRestore(ctx context.Context, mark fsm.RestoreMark, res *api.RestoreResult) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreConfirmWait)
	defer cancel()
	for {
		res.Servers, res.Complete = res.Servers[:0], true
		if f := s.raft.GetConfiguration(); f.Error() == nil {
			for _, srv := range f.Configuration().Servers {
				rs := api.RestoredServer{ID: string(srv.ID)}
				rs.Restored, rs.Error = s.hasRestore(ctx, rs.ID, mark)
				res.Complete = res.Complete && rs.Restored
				res.Servers = append(res.Servers, rs)
			}
		}
		if res.Complete || !sleep(s.clock, 200*time.Millisecond, ctx.Done()) {
			return
		}
	}
}

// hasRestore asks server id whether its replica descends from restore
// mark.
func (s *Server) hasRestore(ctx context.Context, id string, mark fsm.RestoreMark) (bool, string) {
	if id == s.config.NodeID {
		return s.fsm.Read().RestoreMark() == mark, ""
	}
	m, ok := s.gossip.memberByID(id)
	if !ok || m.HTTPAddr == "" {
		return false, "not known through gossip"
	}
	st, err := s.peers.status(ctx, m.HTTPAddr)
	switch {
	case err != nil:
		return false, err.Error()
	case st.RestoreSeq == mark.Seq && st.RestoreID == mark.ID:
		return true, ""
	}
	return false, fmt.Sprintf("its state descends from restore %d (%s), not yet this one", st.RestoreSeq, st.RestoreID)
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
