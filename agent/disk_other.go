//go:build !unix

package agent

import "errors"

// freeBytes is not known outside Unix: a disk requirement then waits.
func freeBytes(string) (uint64, error) {
	return 0, errors.New("free space is not measured on this platform")
}
