package chaos

import (
	"time"

	"github.com/hashicorp/go-hclog"
)

// Option adjusts a chaos component at construction. Options that do not
// apply to a component are ignored by it.
type Option func(*options)

type options struct {
	logger      hclog.Logger
	maxQueue    int
	idleTimeout time.Duration
	dialTimeout time.Duration
	natBinding  time.Duration
	clock       Clock
}

// Defaults used when no Option overrides them.
const (
	// DefaultMaxQueue bounds the packets a PacketConn or UDPProxy holds for
	// delayed delivery, and the packets a PacketConn buffers for ReadFrom.
	DefaultMaxQueue = 1 << 14
	// DefaultIdleTimeout is how long a UDPProxy keeps a silent client session.
	DefaultIdleTimeout = time.Minute
	// DefaultDialTimeout bounds proxies' dials to their targets and the
	// preamble exchange of Network connections.
	DefaultDialTimeout = 5 * time.Second
)

// WithLogger sets the logger; nil means hclog.NewNullLogger().
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMaxQueue bounds queued packets (see DefaultMaxQueue); n <= 0 means
// the default. Packets beyond the bound are dropped and logged as
// KindOverflow, the way a full socket buffer drops them.
func WithMaxQueue(n int) Option { return func(o *options) { o.maxQueue = n } }

// WithIdleTimeout sets how long a UDPProxy keeps a client session with no
// traffic in either direction; d <= 0 means DefaultIdleTimeout.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = d } }

// WithNATBinding makes a UDPProxy behave like a NAT in front of its
// clients: a client's binding lives d after the client last sent (only
// outbound traffic refreshes it, the least RFC 4787 allows), the target's
// datagrams to a lapsed binding are dropped, and the client's next
// datagram gets a new binding: a new socket, so the target sees the
// client at a new address. d <= 0 (the default) keeps bindings for the
// idle timeout.
func WithNATBinding(d time.Duration) Option { return func(o *options) { o.natBinding = d } }

// WithClock sets the clock a UDPProxy judges NAT bindings by; nil means
// RealClock{}. Tests step a SkewedClock to let a binding lapse.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithDialTimeout bounds dials to proxy targets and connection preambles;
// d <= 0 means DefaultDialTimeout.
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.logger == nil {
		o.logger = hclog.NewNullLogger()
	}
	if o.maxQueue <= 0 {
		o.maxQueue = DefaultMaxQueue
	}
	if o.idleTimeout <= 0 {
		o.idleTimeout = DefaultIdleTimeout
	}
	if o.dialTimeout <= 0 {
		o.dialTimeout = DefaultDialTimeout
	}
	if o.clock == nil {
		o.clock = RealClock{}
	}
	return o
}
