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
	return o
}
