package cluster

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// parseIntent parses and validates an intent document from the API.
func parseIntent(body []byte) (*intent.Intent, error) {
	return intent.Parse(body)
}

// isValidation reports whether err is an intent validation error.
func isValidation(err error) bool {
	var ve *intent.ValidationError
	return errors.As(err, &ve)
}

// removeServer removes a server from the Raft configuration (leader only).
func (s *Server) removeServer(id string) error {
	if id == s.config.NodeID {
		return fmt.Errorf("server %s is the leader: ask it to leave ('meteor leave') or remove it through another server after leadership moves", id)
	}
	if err := s.raft.RemoveServer(raft.ServerID(id), 0, s.config.ApplyTimeout).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return ErrNotLeader
		}
		return fmt.Errorf("remove server %s: %w", id, err)
	}
	s.logger.Info("removed server from the raft configuration", "peer", id)
	return nil
}
