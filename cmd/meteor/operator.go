package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

func newOperatorCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "operator", Short: "Operate the cluster's Raft configuration"}
	rc := &cobra.Command{
		Use:   "raft",
		Short: "List the Raft peers, remove one, hand leadership over, or recover a cluster that lost its majority",
	}
	var stale bool
	list := &cobra.Command{
		Use: "list-peers", Short: "List the servers of the Raft configuration", Args: cobra.NoArgs,
		Long: `List the servers of the Raft configuration as the leader sees them (with
--stale, as the server at --addr does): address, suffrage, whether each is
alive (alive in gossip and answering), how far it trails the leader's log,
its version and feature level; then how many voters a commit needs and how
many more may fail.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().RaftConfiguration(cmd.Context(), api.ReadOptions{Stale: stale})
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			printRaftConfiguration(cmd.OutOrStdout(), res)
			return nil
		},
	}
	list.Flags().BoolVar(&stale, "stale", false, "as the contacted server sees it, without asking the leader")
	transfer := &cobra.Command{
		Use: "transfer-leader [ID]", Short: "Make the leader hand leadership to voter ID (or the most up-to-date one)", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			to := ""
			if len(args) == 1 {
				to = args[0]
			}
			res, err := g.client().TransferLeader(cmd.Context(), to)
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "leadership moved from %s to %s\n", res.Previous, res.Leader)
			return nil
		},
	}
	rc.AddCommand(list, newRemovePeerCmd(g, "remove-peer"), transfer, newRecoverCmd(g))
	cmd.AddCommand(rc)
	return cmd
}

// newRemovePeerCmd is 'meteor members remove' and 'meteor operator raft
// remove-peer', one command under two names.
func newRemovePeerCmd(g *globals, name string) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use: name + " ID", Short: "Remove a failed server from the Raft configuration", Args: cobra.ExactArgs(1),
		Long: `Remove a server from the Raft configuration, on the leader. A failed server
counts against the quorum until it is removed. The leader refuses, saying
why, to remove a server that is alive (alive in gossip and answering): it
would add it back at once ('meteor members leave' removes a live server for
good), and above all one whose removal would leave fewer alive voters than
a commit needs. --force removes it all the same.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().RemoveMember(cmd.Context(), args[0], force); err != nil {
				return err
			}
			return g.acted(cmd.OutOrStdout(), "remove-member", args[0], fmt.Sprintf("server %s removed", args[0]))
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove it even if it is alive or the voters left could not commit")
	return cmd
}

func printRaftConfiguration(w io.Writer, c *api.RaftConfiguration) {
	tw := table(w)
	fmt.Fprintln(tw, "ID\tADDRESS\tSUFFRAGE\tLEADER\tALIVE\tGOSSIP\tAPPLIED\tTRAILS BY\tVERSION\tLEVEL\tNOTE")
	for _, p := range c.Peers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\t%s\t%d\t%d\t%s\t%d\t%s\n", p.ID, p.Address, p.Suffrage, p.Leader, p.Alive, p.GossipState, p.AppliedIndex, p.TrailsBy, p.Version, p.FeatureLevel, p.Error)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d voters, %d alive; a commit needs %d: ", c.Voters, c.AliveVoters, c.Quorum)
	switch {
	case c.FailureTolerance < 0:
		fmt.Fprintln(w, "NO MAJORITY ALIVE, the cluster takes no writes (bring voters back, or 'meteor operator raft recover' if they are lost for good)")
	default:
		fmt.Fprintf(w, "%d more may fail\n", c.FailureTolerance)
	}
}

func newRecoverCmd(g *globals) *cobra.Command {
	var o cluster.RecoverOptions
	var peers string
	historyLimit := fsm.DefaultHistoryLimit
	cmd := &cobra.Command{
		Use:   "recover --data-dir DIR",
		Short: "Recover a cluster that lost its majority for good, on a stopped survivor's data dir",
		Long: `Recover a cluster that lost a majority of its servers for good. Run it on
the data dir of a STOPPED survivor: it replays the survivor's whole Raft log
into the state, writes it as a snapshot whose configuration is this server
alone (or --peers, given identically to every survivor), and empties the log.
Then start the server as before: it leads a cluster of one (or the survivors
elect one) with every entry it had, and takes writes; add servers with empty
data dirs (--join). Entries the survivor held but the lost majority had not
committed become committed. Never start a lost server with its old data dir:
wipe it first. Give the cluster's --history-limit if it is not the default.
docs/operations.md, "Losing a majority for good".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.DataDir == "" {
				return &usageError{fmt.Errorf("--data-dir is required")}
			}
			for _, p := range strings.Split(peers, ",") {
				if p == "" {
					continue
				}
				id, addr, ok := strings.Cut(p, "=")
				if !ok {
					return &usageError{fmt.Errorf("--peers %q: want ID=RAFT-ADDRESS,...", p)}
				}
				o.Peers = append(o.Peers, cluster.RecoverPeer{ID: id, Address: addr})
			}
			o.FSM = fsm.DefaultConfig()
			o.FSM.HistoryLimit = historyLimit
			o.Logger = hclog.NewNullLogger()
			res, err := cluster.RecoverRaft(o)
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "recovered %s in %s: log up to index %d (term %d), state at index %d, revision %d\n", res.NodeID, o.DataDir, res.LastIndex, res.LastTerm, res.Index, res.Revision)
			fmt.Fprintf(out, "  configuration was: %s\n", peerList(res.Old))
			fmt.Fprintf(out, "  configuration now: %s\n", peerList(res.New))
			fmt.Fprintln(out, "start the server again as before; wipe the data dirs of the lost servers before they join again")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.DataDir, "data-dir", "", "data dir of the stopped server (required)")
	f.StringVar(&o.NodeID, "node-id", "", "the server's node ID (checked against the data dir's)")
	f.StringVar(&o.RaftAddr, "raft-addr", "", "the server's Raft address, if not the one its last configuration has")
	f.StringVar(&peers, "peers", "", "ID=RAFT-ADDRESS,... of every survivor, this one included, when more than one survives")
	f.IntVar(&historyLimit, "history-limit", historyLimit, "the cluster's --history-limit")
	return cmd
}

func peerList(ps []cluster.RecoverPeer) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID+" at "+p.Address)
	}
	return strings.Join(out, ", ")
}
