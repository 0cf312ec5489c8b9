package hosts

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Commands is a driver that runs a shell command template per action, for
// deployments that are not Docker: systemd units over ssh, cloud CLIs,
// firewall scripts. Templates may use these placeholders, replaced
// verbatim (quote them in the template if they may hold spaces):
//
//	{id} {host} {addr}                 the server acted on
//	{peer_id} {peer_host} {peer_addr}  the other end of a cut or mend (empty otherwise)
//
// For example:
//
//	Kill:    "ssh {host} sudo systemctl kill -s KILL meteor"
//	Start:   "ssh {host} sudo systemctl start meteor"
//	Isolate: "ssh {host} sudo nft -f /etc/meteor/isolate.nft"
//	Cut:     "ssh {host} sudo nft add rule inet filter input ip saddr {peer_host} drop"
//
// An action without a template is unsupported. A command that exits
// non-zero fails the action; its output is in the error.
type Commands struct {
	// Servers are the deployment's servers, indexed as the caller lists
	// them.
	Servers []Server
	// Templates holds one command per supported action.
	Templates map[Action]string
	// Shell runs a command; nil means {"sh", "-c"}.
	Shell []string
	// Timeout bounds each command; 0 means 30 s.
	Timeout time.Duration
}

var _ Driver = (*Commands)(nil)

// Supports reports whether a template is set for a.
func (c *Commands) Supports(a Action) bool { return strings.TrimSpace(c.Templates[a]) != "" }

// Expand returns the command Do would run.
func (c *Commands) Expand(a Action, i, peer int) (string, error) {
	if err := checkIndex(len(c.Servers), i, peer, a); err != nil {
		return "", err
	}
	tmpl := c.Templates[a]
	if strings.TrimSpace(tmpl) == "" {
		return "", fmt.Errorf("%w: no command template for %s", ErrUnsupported, a)
	}
	s := c.Servers[i]
	pairs := []string{"{id}", s.ID, "{host}", s.Host, "{addr}", s.Addr}
	var p Server // empty for actions without a peer
	if peer >= 0 {
		p = c.Servers[peer]
	}
	pairs = append(pairs, "{peer_id}", p.ID, "{peer_host}", p.Host, "{peer_addr}", p.Addr)
	return strings.NewReplacer(pairs...).Replace(tmpl), nil
}

// Do runs the expanded template of a and returns it.
func (c *Commands) Do(ctx context.Context, a Action, i, peer int) (string, error) {
	line, err := c.Expand(a, i, peer)
	if err != nil {
		return "", err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	shell := c.Shell
	if len(shell) == 0 {
		shell = []string{"sh", "-c"}
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, shell[0], append(shell[1:len(shell):len(shell)], line)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return line, fmt.Errorf("hosts: %s %s: %q: %w: %s", a, c.Servers[i].ID, line, err, strings.TrimSpace(out.String()))
	}
	return line, nil
}
