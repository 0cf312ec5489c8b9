package cluster

import (
	"fmt"
	"regexp"
)

var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CheckNodeID says what is wrong with a server node ID, if anything.
func CheckNodeID(id string) error {
	if !nodeIDPattern.MatchString(id) {
		return fmt.Errorf("node ID %q: must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", id)
	}
	return nil
}
