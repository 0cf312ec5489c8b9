package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/wire"
)

// Rolling upgrades. Every server advertises in its gossip metadata the
// feature level of its state machine (fsm.FeatureLevel) and the agent
// protocol minor it speaks (wire.ProtocolMinor). A server that does not
// know a command type stops rather than skip it (fsm.Apply), so the
// leader proposes a command of a level above 1 only once every server of
// the cluster runs that level (requireFeature); until then the command is
// held back with a *HeldBackError (409 held_back). Operations outside the
// log that every replica must understand, such as an operator restore
// (snapshot version 2), are held back the same way.

// featureLevel is the feature level this server runs and advertises.
func (c *Config) featureLevel() uint16 {
	if c.FeatureLevel == 0 {
		return fsm.FeatureLevel
	}
	return c.FeatureLevel
}

// wireMinor is the agent protocol minor this server speaks and advertises.
func (c *Config) wireMinor() uint16 {
	if c.WireMinor == 0 {
		return wire.ProtocolMinor
	}
	return c.WireMinor
}

// featureLevel is the level a server's gossip metadata advertises;
// servers from before the field run level 1.
func (m nodeMeta) featureLevel() uint16 { return max(m.Features, 1) }

// HeldBackError refuses a command or an operation that some server of the
// cluster could not apply: it needs a feature level above what that
// server runs.
type HeldBackError struct {
	// What is held back: a command type or an operation.
	What string
	// Level is the feature level it needs.
	Level uint16
	// Behind lists the servers below Level.
	Behind []ServerLevel
}

// ServerLevel is a server's feature level as gossip advertises it.
type ServerLevel struct {
	ID string
	// Level is 1 for a server whose gossip metadata this server has never
	// seen (Known false).
	Level   uint16
	Version string
	Known   bool
}

func (e *HeldBackError) Error() string {
	var behind []string
	for _, s := range e.Behind {
		if s.Known {
			behind = append(behind, fmt.Sprintf("%s runs feature level %d (Meteor %s)", s.ID, s.Level, s.Version))
		} else {
			behind = append(behind, fmt.Sprintf("%s has not been seen through gossip since this server started, so its level is unknown", s.ID))
		}
	}
	return fmt.Sprintf("%s is held back until every server runs feature level %d: %s; upgrade those servers first (docs/operations.md, \"Upgrading\")",
		e.What, e.Level, strings.Join(behind, "; "))
}

// requireFeature returns a *HeldBackError unless every server of the
// cluster runs feature level level: every server in the Raft
// configuration (whether alive or not: a failed one applies the log when
// it returns), and every server alive in gossip and not leaving (the
// membership reconciler is about to add it).
func (s *Server) requireFeature(level uint16, what string) error {
	if level <= 1 {
		return nil
	}
	ids := map[string]bool{}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("read the raft configuration: %w", err)
	}
	for _, srv := range f.Configuration().Servers {
		ids[string(srv.ID)] = true
	}
	known := map[string]member{}
	for _, m := range s.members() {
		known[m.ID] = m
		if m.State == memberlist.StateAlive && !m.Leaving {
			ids[m.ID] = true
		}
	}
	var behind []ServerLevel
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		m, ok := known[id]
		sl := ServerLevel{ID: id, Level: 1, Known: ok}
		if ok {
			sl.Level, sl.Version = m.featureLevel(), m.Version
		}
		if sl.Level < level {
			behind = append(behind, sl)
		}
	}
	if len(behind) > 0 {
		return &HeldBackError{What: what, Level: level, Behind: behind}
	}
	return nil
}

// levelRaiser is the leader worker that raises the cluster's active
// feature level (fsm.SetFeatureLevelType) to this server's once every
// server of the cluster runs it (requireFeature): what a release applies
// differently from the one before waits until then (fsm/features.go). It
// tries at the start of each term and every interval.
type levelRaiser struct {
	s        *Server
	interval time.Duration
}

func (s *Server) levelRaiser() *levelRaiser {
	return &levelRaiser{s: s, interval: s.config.ReconcileInterval}
}

func (r *levelRaiser) Name() string { return "feature-level" }

func (r *levelRaiser) Run(ctx context.Context) error {
	t := r.s.clock.NewTicker(r.interval)
	defer t.Stop()
	for {
		if done, err := r.raise(ctx); err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// raise proposes this server's level if the cluster is ready for it; done
// when the level is active.
func (r *levelRaiser) raise(ctx context.Context) (done bool, err error) {
	s := r.s
	want, active := s.config.featureLevel(), s.fsm.Read().ActiveLevel()
	if active >= want {
		return true, nil
	}
	// No server joins between the check and the commit
	// (membershipReconciler.add).
	s.levelMu.Lock()
	defer s.levelMu.Unlock()
	if err := s.requireFeature(want, fmt.Sprintf("feature level %d", want)); err != nil {
		s.logger.Debug("feature level not raised yet", "active", active, "level", want, "why", err)
		return false, nil
	}
	res, _, err := s.Propose(ctx, fsm.SetFeatureLevelType, &fsm.SetFeatureLevelRequest{Level: want, Time: s.clock.Now().UnixNano()})
	if err != nil {
		return false, fmt.Errorf("raise the feature level to %d: %w", want, err)
	}
	if res.Err != nil && s.fsm.Read().ActiveLevel() < want {
		return false, fmt.Errorf("raise the feature level to %d: %w", want, res.Err)
	}
	s.logger.Info("feature level raised: every server runs it", "level", want, "was", active)
	return true, nil
}
