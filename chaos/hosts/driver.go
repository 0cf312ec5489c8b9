package hosts

import (
	"context"
	"errors"
	"fmt"
)

// Action is one thing a driver does to a server.
type Action string

// Actions. Each fault action has an undo action; a [Runner] always undoes
// what it did before it returns.
const (
	// Kill stops the server abruptly (SIGKILL): it keeps what it fsynced.
	Kill Action = "kill"
	// Start starts a killed server again with its data.
	Start Action = "start"
	// Pause freezes the server's process (SIGSTOP, cgroup freezer): it
	// wakes with its timers expired, believing what it believed.
	Pause Action = "pause"
	// Unpause thaws a paused server.
	Unpause Action = "unpause"
	// Isolate cuts the server off the network: from the other servers and
	// from clients.
	Isolate Action = "isolate"
	// Heal undoes Isolate.
	Heal Action = "heal"
	// Cut drops every packet between the server and one peer, both ways;
	// both still reach everyone else.
	Cut Action = "cut"
	// Mend undoes Cut.
	Mend Action = "mend"
)

// Actions returns every action, faults and their undos in pairs.
func Actions() []Action { return []Action{Kill, Start, Pause, Unpause, Isolate, Heal, Cut, Mend} }

// Undo returns the action that undoes a fault action, or "" for an undo
// action.
func (a Action) Undo() Action {
	switch a {
	case Kill:
		return Start
	case Pause:
		return Unpause
	case Isolate:
		return Heal
	case Cut:
		return Mend
	}
	return ""
}

// ErrUnsupported is returned by a driver asked for an action it was not
// configured for.
var ErrUnsupported = errors.New("hosts: action not supported by this driver")

// Server is one server of a deployment, as drivers and command templates
// name it.
type Server struct {
	// ID is the server's node ID (from its /v1/health).
	ID string
	// Host is the host name or container the server runs on.
	Host string
	// Addr is the server's HTTP API address (host:port).
	Addr string
}

// Driver performs actions on the servers of a deployment, indexed as the
// caller listed them. Implementations are safe for concurrent use.
type Driver interface {
	// Supports reports whether the driver can perform a.
	Supports(a Action) bool
	// Do performs a on server i; peer is the other end for Cut and Mend
	// and -1 otherwise. It returns what it did (the commands it ran), for
	// the fault log.
	Do(ctx context.Context, a Action, i, peer int) (string, error)
}

func checkIndex(n, i, peer int, a Action) error {
	if i < 0 || i >= n {
		return fmt.Errorf("hosts: %s: server %d of %d", a, i, n)
	}
	needPeer := a == Cut || a == Mend
	switch {
	case needPeer && (peer < 0 || peer >= n || peer == i):
		return fmt.Errorf("hosts: %s: server %d and peer %d of %d", a, i, peer, n)
	case !needPeer && peer >= 0:
		return fmt.Errorf("hosts: %s takes no peer", a)
	}
	return nil
}
