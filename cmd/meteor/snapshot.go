package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cluster/snapshot"
)

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save, restore and inspect backups of the whole cluster state",
		Long: `Save the whole replicated state (intents with their history, devices,
tokens, the audit log, rollouts) to a file, restore such a file over every
server, or check one. Saving and restoring need an admin token; both are
recorded in the audit log. The file carries the state's size and SHA-256:
a corrupt or truncated file is refused before anything changes.`,
	}
	var stale bool
	save := &cobra.Command{
		Use: "save FILE", Short: "Save the cluster's state to FILE", Args: cobra.ExactArgs(1),
		Long: `Save the cluster's state to FILE. The state is read on the leader once it
confirmed it leads, so it holds every write acknowledged before the command;
with --stale, from the replica of the server at --addr, which works without a
leader (a backup of a survivor) but may lag. The file is written beside FILE,
checked and renamed into place: FILE is a complete backup or is not written.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := saveSnapshotFile(cmd, g.client(), args[0], stale)
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), h)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "saved %s: index %d, revision %d, %d bytes of state, sha256 %s (from %s%s)\n",
				args[0], h.Index, h.Revision, h.Size, h.SHA256, h.Server, map[bool]string{true: ", stale", false: ""}[h.Stale])
			return nil
		},
	}
	save.Flags().BoolVar(&stale, "stale", false, "read the state from the contacted server's replica, without a leader")
	var minRevision uint64
	var restoreCredentials bool
	restore := &cobra.Command{
		Use: "restore FILE", Short: "Restore FILE over the state of every server", Args: cobra.ExactArgs(1),
		Long: `Restore the backup in FILE over the whole cluster: every server's state
becomes the backup's, however far the cluster had moved on since. The file
is checked here and again by the leader before anything changes. The
restored state takes a revision above both the backup's and the replaced
state's, so agents take it as a new desired state and converge back to it.
Revocations made since the backup are kept: a device revoked since stays
revoked (the restored state holds both states' revocations), and over a
later state of the same cluster a token revoked since stays revoked and an
enroll token keeps the uses counted since. Otherwise the tokens are the
backup's: a token created after the backup stops working. Into a new or
another cluster every token of the backup is restored.
--restore-credentials brings the backup's tokens back as they were, those
revoked since included (revoked devices stay revoked: unrevoke them).
--min-revision sets the least revision the restored state takes: restoring
an older backup into a new cluster, give one above any the lost cluster
reached, or agents that acknowledged a later revision are sent away as
lagging until the cluster passes it (docs/operations.md).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, h, err := openSnapshotFile(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			res, err := g.client().RestoreSnapshot(cmd.Context(), f, api.RestoreOptions{MinRevision: minRevision, RestoreCredentials: restoreCredentials})
			if res == nil {
				return err
			}
			if g.structured() {
				if perr := g.print(cmd.OutOrStdout(), res); perr != nil {
					return perr
				}
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "restored %s (index %d, revision %d) on %s: the cluster is at revision %d, restore %d (%s)\n",
				args[0], h.Index, h.Revision, res.Leader, res.Revision, res.RestoreSeq, res.RestoreID)
			printCarried(out, res.Carried)
			for _, s := range res.Servers {
				if s.Restored {
					fmt.Fprintf(out, "  %s: restored\n", s.ID)
				} else {
					fmt.Fprintf(out, "  %s: NOT CONFIRMED: %s\n", s.ID, s.Error)
				}
			}
			return err
		},
	}
	restore.Flags().Uint64Var(&minRevision, "min-revision", 0, "least revision the restored state takes (restoring into a new cluster)")
	restore.Flags().BoolVar(&restoreCredentials, "restore-credentials", false, "bring the backup's tokens back as they were, those revoked since included")
	inspect := &cobra.Command{
		Use: "inspect FILE", Short: "Check FILE and say what it holds", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := inspectSnapshotFile(args[0])
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), in)
			}
			printInspection(cmd.OutOrStdout(), args[0], in)
			return nil
		},
	}
	cmd.AddCommand(save, restore, inspect)
	return cmd
}

// saveSnapshotFile streams a backup into a file beside path, checks it,
// syncs it and renames it to path.
func saveSnapshotFile(cmd *cobra.Command, c *api.Client, path string, stale bool) (*snapshot.Header, error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".part-*")
	if err != nil {
		return nil, fmt.Errorf("snapshot save: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	if _, err := c.SaveSnapshot(cmd.Context(), w, stale); err != nil {
		return nil, fmt.Errorf("snapshot save: %w; %s not written", err, path)
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("snapshot save: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, fmt.Errorf("snapshot save: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	h, err := snapshot.Verify(bufio.NewReaderSize(tmp, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("snapshot save: what the server sent does not check: %w; %s not written", err, path)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("snapshot save: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, fmt.Errorf("snapshot save: %w", err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return h, nil
}

// openSnapshotFile opens a backup and checks it in full, and returns it
// at its start.
func openSnapshotFile(path string) (*os.File, *snapshot.Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	h, err := snapshot.Verify(bufio.NewReaderSize(f, 1<<20))
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w; nothing was restored", path, err)
	}
	return f, h, nil
}

// inspection is what 'meteor snapshot inspect' says of a file.
type inspection struct {
	Header *snapshot.Header `json:"header"`
	// Records counts the state's records by kind (intent, history,
	// device, timeline, token, audit, ...).
	Records map[string]int `json:"records"`
	// Restore is the operator restore the state descends from, if any.
	Restore json.RawMessage `json:"restore,omitempty"`
}

func inspectSnapshotFile(path string) (*inspection, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, state, err := snapshot.Open(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	in := &inspection{Header: h, Records: map[string]int{}}
	sc := bufio.NewScanner(state)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	first := true
	for sc.Scan() {
		if first {
			var sh struct {
				Restore json.RawMessage `json:"restore"`
			}
			json.Unmarshal(sc.Bytes(), &sh)
			in.Restore, first = sh.Restore, false
			continue
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s: record %d: %w", path, sumCounts(in.Records)+1, err)
		}
		for k := range rec {
			in.Records[k]++
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, snapshot.ErrInvalid) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, fmt.Errorf("%s: read: %w", path, err)
	}
	return in, nil
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func printInspection(w io.Writer, path string, in *inspection) {
	h := in.Header
	fmt.Fprintf(w, "%s: intact\n", path)
	tw := table(w)
	fmt.Fprintf(tw, "index\t%d\n", h.Index)
	fmt.Fprintf(tw, "revision\t%d\n", h.Revision)
	fmt.Fprintf(tw, "taken\t%s by %s (Meteor %s)%s\n", h.TakenAt.UTC().Format("2006-01-02 15:04:05 MST"), h.Server, h.MeteorVersion, map[bool]string{true: ", stale read", false: ""}[h.Stale])
	fmt.Fprintf(tw, "state\t%s version %d, %d bytes, sha256 %s\n", h.StateFormat, h.StateVersion, h.Size, h.SHA256)
	if len(in.Restore) > 0 {
		fmt.Fprintf(tw, "descends from restore\t%s\n", in.Restore)
	}
	kinds := make([]string, 0, len(in.Records))
	for k := range in.Records {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", strings.ReplaceAll(k, "_", " "), in.Records[k]))
	}
	fmt.Fprintf(tw, "records\t%s\n", strings.Join(parts, ", "))
	tw.Flush()
}

// printCarried says what a restore kept of the state it replaced.
func printCarried(out io.Writer, c api.RestoreCarried) {
	fmt.Fprintf(out, "  kept revoked: %d devices revoked since the backup%s\n", len(c.KeptRevoked), idList(c.KeptRevoked))
	switch {
	case c.BackupCredentials:
		fmt.Fprintf(out, "  tokens: the backup's, as they were (--restore-credentials)\n")
	case !c.SameCluster:
		fmt.Fprintf(out, "  tokens: the backup's, as they were: %s\n", c.Basis)
	default:
		fmt.Fprintf(out, "  tokens not restored: %d revoked since the backup%s\n", len(c.TokensNotRestored), idList(c.TokensNotRestored))
		if len(c.TokenUsesKept) > 0 {
			fmt.Fprintf(out, "  enroll tokens with their uses since: %d%s\n", len(c.TokenUsesKept), idList(c.TokenUsesKept))
		}
	}
}

// idList lists up to 10 IDs after a colon.
func idList(ids []string) string {
	switch {
	case len(ids) == 0:
		return ""
	case len(ids) > 10:
		return ": " + strings.Join(ids[:10], ", ") + fmt.Sprintf(" and %d more", len(ids)-10)
	}
	return ": " + strings.Join(ids, ", ")
}
