//go:build linux

package agent

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// peerOf names the local user at the other end of a control connection
// ("uid 0 (root), pid 4242"), refusing anyone but the agent's own user and
// root: the socket's mode already keeps others out, and this holds if its
// directory's mode was loosened.
func peerOf(conn *net.UnixConn) (string, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return "", err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return "", err
	}
	if credErr != nil {
		return "", fmt.Errorf("peer credentials: %w", credErr)
	}
	if me := os.Geteuid(); int(cred.Uid) != me && cred.Uid != 0 {
		return "", fmt.Errorf("uid %d may not use this agent's control socket (only uid %d and root)", cred.Uid, me)
	}
	who := "uid " + strconv.FormatUint(uint64(cred.Uid), 10)
	if u, err := user.LookupId(strconv.FormatUint(uint64(cred.Uid), 10)); err == nil {
		who += " (" + u.Username + ")"
	}
	return fmt.Sprintf("%s, pid %d", who, cred.Pid), nil
}
