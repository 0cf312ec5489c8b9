package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/cmd/internal/cliflags"
	"github.com/meteor-edge/meteor/fsm/acl"
)

func newTokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke operator and enrollment tokens (needs an admin token)",
	}
	var req api.CreateTokenRequest
	var policy, scope, labels string
	var enroll bool
	var ttl time.Duration
	create := &cobra.Command{
		Use:   "create --policy POLICY | --enroll",
		Short: "Create a token and print its secret (shown only this once)",
		Long: `Create a token. Policies: read (reads everything), operator (reads, writes
and deletes intents, reads the audit log), admin (also manages tokens and
members), enroll (enrolls devices, which get --labels). --scope narrows a read
or operator token to the intents whose selector stays within the labels given
("*" accepts any value).`,
		Example: `  meteor token create --policy operator --name ci --ttl 720h
  meteor token create --policy operator --scope region=eu --name eu-ops
  meteor token create --enroll --labels region=eu,site=store-42 --ttl 15m --uses 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			switch {
			case enroll && policy != "" && policy != string(acl.PolicyEnroll):
				return fmt.Errorf("--enroll makes an enroll token: drop --policy %s", policy)
			case enroll:
				policy = string(acl.PolicyEnroll)
			case policy == "":
				return errors.New("--policy: give read, operator, admin or enroll (or --enroll)")
			}
			req.Policy = acl.Policy(policy)
			if req.Scope, err = cliflags.KeyValues("--scope", scope); err != nil {
				return err
			}
			if req.EnrollLabels, err = cliflags.KeyValues("--labels", labels); err != nil {
				return err
			}
			if err := acl.ValidateGrant(req.Policy, req.Scope, req.EnrollLabels); err != nil {
				return err
			}
			if ttl < 0 {
				return fmt.Errorf("--ttl %s: must not be negative", ttl)
			}
			if ttl > 0 {
				req.TTL = ttl.String()
			}
			res, err := g.client().CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "accessor %s (%s token %q)\n", res.Token.Accessor, res.Token.Policy, res.Token.Name)
			fmt.Fprintf(w, "secret   %s\n", res.Secret)
			fmt.Fprintln(w, "The secret is shown only now: keep it (meteor takes --token, --token-file or METEOR_TOKEN).")
			return nil
		},
	}
	f := create.Flags()
	f.StringVar(&policy, "policy", "", "read, operator, admin or enroll")
	f.BoolVar(&enroll, "enroll", false, "an enroll token: the same as --policy enroll")
	f.StringVar(&req.Name, "name", "", "a name for listings and the audit log")
	f.StringVar(&scope, "scope", "", "comma-separated key=value labels a read or operator token is narrowed to")
	f.StringVar(&labels, "labels", "", "comma-separated key=value labels devices enrolled with an enroll token get")
	f.DurationVar(&ttl, "ttl", 0, "how long the token lasts (0: until revoked)")
	f.Uint64Var(&req.Uses, "uses", 0, "how many devices an enroll token may enroll (0: no limit)")

	list := &cobra.Command{
		Use: "list", Short: "List the tokens (never their secrets)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().Tokens(cmd.Context())
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			printTokens(cmd.OutOrStdout(), res)
			return nil
		},
	}
	revoke := &cobra.Command{
		Use: "revoke ACCESSOR", Short: "Revoke a token: every server refuses it within seconds", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().RevokeToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			return g.acted(cmd.OutOrStdout(), "revoke-token", args[0], fmt.Sprintf("token %s revoked", args[0]))
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func printTokens(w io.Writer, res *api.TokenList) {
	tw := table(w)
	fmt.Fprintln(tw, "ACCESSOR\tNAME\tPOLICY\tSCOPE/LABELS\tUSES\tEXPIRES\tCREATED BY")
	for _, t := range res.Tokens {
		labels := t.Scope
		if t.Policy == acl.PolicyEnroll {
			labels = t.EnrollLabels
		}
		uses := "-"
		if t.Policy == acl.PolicyEnroll {
			uses = fmt.Sprintf("%d/%d", t.Uses, t.MaxUses)
		}
		expires := "never"
		if t.ExpiresAt != nil {
			expires = t.ExpiresAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Accessor, t.Name, t.Policy, formatLabels(labels), uses, expires, t.CreatedBy)
	}
	tw.Flush()
}

func formatLabels(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func newAuditCmd(g *globals) *cobra.Command {
	var q api.AuditQuery
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show who changed which intent, token or member, newest first (needs an operator or admin token)",
		Example: `  meteor audit --limit 20
  meteor audit --target intent/web
  meteor audit --actor ci`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().Audit(cmd.Context(), q)
			if err != nil {
				return err
			}
			if g.structured() {
				return g.print(cmd.OutOrStdout(), res)
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "INDEX\tTIME\tACTOR\tACTION\tTARGET\tSUMMARY")
			for _, r := range res.Records {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Index, r.Time.Format(time.RFC3339), r.Actor, r.Action, r.Target, r.Summary)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&q.Limit, "limit", 50, "most records shown (-1: every retained one)")
	f.StringVar(&q.Actor, "actor", "", "only this actor's records (token accessor, name, or system)")
	f.StringVar(&q.Target, "target", "", "only this target (intent/web; intent/ for every intent)")
	return cmd
}
