package main

import (
	"fmt"
	"time"

	"github.com/meteor-edge/meteor/chaos"
)

// The link profiles a run can measure.
const (
	// linkFiber is an urban store's wired uplink, as `meteor sim` has
	// it: about 1 ms each way, no loss, behind a store router's NAT that
	// keeps a UDP binding 5 minutes.
	linkFiber = "fiber"
	// linkCellular is chaos's named cellular profile: 60 ms ± 30 ms each
	// way, 2 % loss with short bursts, some reordering and duplicates,
	// behind a carrier NAT that keeps a UDP binding 2 minutes (the least
	// RFC 4787 allows).
	linkCellular = "cellular"
)

// natBinding is how long the NAT of a profile keeps a binding after the
// device last sent.
func natBinding(name string) time.Duration {
	if name == linkCellular {
		return 2 * time.Minute
	}
	return 5 * time.Minute
}

// linkProfile returns the profile of name, applied in both directions of
// every proxy.
func linkProfile(name string) (chaos.LinkProfile, error) {
	var p chaos.LinkProfile
	switch name {
	case linkFiber:
		p = chaos.LinkProfile{Delay: time.Millisecond, Jitter: 300 * time.Microsecond}
	case linkCellular:
		var err error
		if p, err = chaos.ProfileByName("cellular"); err != nil {
			return p, err
		}
	default:
		return p, fmt.Errorf("unknown link profile %q", name)
	}
	p.Dir = chaos.DirBoth
	return p, p.Validate()
}
