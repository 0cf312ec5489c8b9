//go:build unix

package agent

import "golang.org/x/sys/unix"

// freeBytes is the space an unprivileged user may still write on the file
// system holding path.
func freeBytes(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
