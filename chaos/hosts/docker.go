package hosts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Docker is a driver for servers running in Docker containers on one
// network of this machine's Docker daemon:
//
//	kill/start       docker kill (SIGKILL) / docker start
//	pause/unpause    docker pause / docker unpause
//	isolate/heal     docker network disconnect / docker network connect
//	                 --ip (the container keeps its address)
//	cut/mend         an nftables table in the container's network
//	                 namespace dropping every packet to and from the peer's
//	                 address, added and deleted with nsenter -t PID -n nft
//	                 from the host (a FROM-scratch image has no nft binary)
//
// Cuts need root (nsenter) and the nft binary on the Docker host. A
// container killed and started again gets a new network namespace, so its
// cuts are gone; the Runner mends before it kills.
type Docker struct {
	// Containers are the server containers, indexed as the servers are.
	Containers []string
	// Network is the network isolate and heal act on.
	Network string
	// IPs are the containers' addresses on Network, kept across a
	// disconnect.
	IPs []string
	// Timeout bounds each command; 0 means 30 s.
	Timeout time.Duration
}

var _ Driver = (*Docker)(nil)

// NewDocker inspects the containers and returns a driver for them. An
// empty network means the one network every container is attached to.
func NewDocker(ctx context.Context, network string, containers []string) (*Docker, error) {
	if len(containers) == 0 {
		return nil, fmt.Errorf("hosts: no containers")
	}
	d := &Docker{Containers: containers, Network: network}
	for _, c := range containers {
		out, err := d.run(ctx, "docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", c)
		if err != nil {
			return nil, err
		}
		var nets map[string]struct {
			IPAddress string `json:"IPAddress"`
		}
		if err := json.Unmarshal([]byte(out), &nets); err != nil {
			return nil, fmt.Errorf("hosts: inspect %s: %w", c, err)
		}
		if d.Network == "" {
			if len(nets) != 1 {
				names := make([]string, 0, len(nets))
				for n := range nets {
					names = append(names, n)
				}
				sort.Strings(names)
				return nil, fmt.Errorf("hosts: %s is on networks %v: name the one to cut", c, names)
			}
			for n := range nets {
				d.Network = n
			}
		}
		n, ok := nets[d.Network]
		if !ok || n.IPAddress == "" {
			return nil, fmt.Errorf("hosts: %s has no address on network %s", c, d.Network)
		}
		d.IPs = append(d.IPs, n.IPAddress)
	}
	return d, nil
}

// Supports reports true for every action.
func (d *Docker) Supports(a Action) bool {
	for _, b := range Actions() {
		if a == b {
			return true
		}
	}
	return false
}

// Do performs a on container i.
func (d *Docker) Do(ctx context.Context, a Action, i, peer int) (string, error) {
	if err := checkIndex(len(d.Containers), i, peer, a); err != nil {
		return "", err
	}
	c := d.Containers[i]
	var args []string
	switch a {
	case Kill:
		args = []string{"docker", "kill", c}
	case Start:
		args = []string{"docker", "start", c}
	case Pause:
		args = []string{"docker", "pause", c}
	case Unpause:
		args = []string{"docker", "unpause", c}
	case Isolate:
		args = []string{"docker", "network", "disconnect", d.Network, c}
	case Heal:
		args = []string{"docker", "network", "connect", "--ip", d.IPs[i], d.Network, c}
	case Cut, Mend:
		return d.nft(ctx, a, i, peer)
	default:
		return "", fmt.Errorf("%w: %s", ErrUnsupported, a)
	}
	line := strings.Join(args, " ")
	_, err := d.run(ctx, args...)
	return line, err
}

// table names the nftables table that cuts server i from peer.
func table(peer int) string { return "meteor_chaos_" + strconv.Itoa(peer) }

func (d *Docker) nft(ctx context.Context, a Action, i, peer int) (string, error) {
	pidOut, err := d.run(ctx, "docker", "inspect", "-f", "{{.State.Pid}}", d.Containers[i])
	if err != nil {
		return "", err
	}
	pid, err := strconv.Atoi(pidOut)
	if err != nil || pid <= 0 {
		return "", fmt.Errorf("hosts: %s %s: container not running (pid %q)", a, d.Containers[i], pidOut)
	}
	ns := []string{"nsenter", "-t", strconv.Itoa(pid), "-n", "nft"}
	if a == Mend {
		args := append(ns, "delete", "table", "inet", table(peer))
		line := strings.Join(args, " ")
		_, err := d.run(ctx, args...)
		return line, err
	}
	ip := d.IPs[peer]
	family := "ip"
	if strings.Contains(ip, ":") {
		family = "ip6"
	}
	script := fmt.Sprintf(`table inet %[1]s {
	chain input { type filter hook input priority -10; policy accept; %[2]s saddr %[3]s drop; }
	chain output { type filter hook output priority -10; policy accept; %[2]s daddr %[3]s drop; }
}
`, table(peer), family, ip)
	args := append(ns, "-f", "-")
	line := fmt.Sprintf("%s <<< 'table inet %s: drop %s to and from %s'", strings.Join(args, " "), table(peer), family, ip)
	_, err = d.runInput(ctx, script, args...)
	return line, err
}

func (d *Docker) run(ctx context.Context, args ...string) (string, error) {
	return d.runInput(ctx, "", args...)
}

func (d *Docker) runInput(ctx context.Context, stdin string, args ...string) (string, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("hosts: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return strings.TrimSpace(out.String()), nil
}
