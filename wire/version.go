package wire

import (
	"errors"
	"fmt"

	"github.com/quic-go/quic-go"
)

// ALPN is the TLS application protocol of major version 1. A server that
// learns another major lists that major's ALPN too; a client offering only
// ALPNs the server lacks fails the TLS handshake (no_application_protocol)
// before any message is sent.
const ALPN = "meteor/1"

// ReleaseVersion is Meteor's release version, the one constant the server
// (cluster.Version) and both binaries, meteor and meteor-agent, share.
const ReleaseVersion = "0.1.0"

// The protocol version this package implements. The major changes only
// with an incompatible change (and a new ALPN); a minor adds message types,
// extensions, enum values or flag bits that a peer of a lower minor never
// receives. Minors so far:
//
//   - 1.0: the first version.
//   - 1.1: Report flag bit 1 (states): each resource report carries its
//     ResourceState instead of a state name at the start of its Detail.
//   - 1.2: Report flag bit 2 (corrections): each resource report carries
//     how many times the agent corrected its drift.
//   - 1.3: Ping and Pong (application keep-alives, which the server uses
//     to judge the session's liveness, and the NAT binding test), and
//     Report flag bit 3 (traffic): the agent's own count of the bytes it
//     exchanged with each server.
//   - 1.4: Settings (the reconcile classes, maintenance windows, time
//     zone, control-plane labels and lock breaks the control plane
//     configures on a device), and Report flag bit 4 (edge): what holds
//     each resource back, the device's workload locks, how its latest
//     restart was recovered, and the outcome of lock breaks.
//   - 1.5: Notify flag bit 0 (delta): a Notify may carry the change as a
//     complete Delta that patches the desired set of a given fingerprint,
//     which an agent holding that set takes without pulling.
const (
	ProtocolMajor uint16 = 1
	ProtocolMinor uint16 = 5
)

// MinorReportStates is the first minor whose Reports may carry typed
// resource states (Report.States).
const MinorReportStates uint16 = 1

// MinorReportCorrections is the first minor whose Reports may carry drift
// correction counts (Report.Corrections).
const MinorReportCorrections uint16 = 2

// MinorKeepAlive is the first minor with Ping and Pong: an agent of a
// session at a lower minor leaves keep-alives to QUIC.
const MinorKeepAlive uint16 = 3

// MinorReportTraffic is the first minor whose Reports may carry the
// agent's traffic counters (Report.Traffic).
const MinorReportTraffic uint16 = 3

// MinorEdge is the first minor with Settings and the Report's edge flag
// (Report.Edge).
const MinorEdge uint16 = 4

// MinorPushDelta is the first minor whose Notify may carry a Delta
// (Notify.Delta).
const MinorPushDelta uint16 = 5

// QUIC application close codes. 0x1-0x5 equal the refusal Code of the
// same name.
const (
	// CloseNormal: orderly close, nothing wrong.
	CloseNormal quic.ApplicationErrorCode = 0x0
	// CloseVersionUnsupported: the peer's major version is not spoken.
	CloseVersionUnsupported quic.ApplicationErrorCode = 0x1
	// CloseLagging: the server is behind the agent; try another server.
	CloseLagging quic.ApplicationErrorCode = 0x2
	// CloseShuttingDown: the server is stopping.
	CloseShuttingDown quic.ApplicationErrorCode = 0x3
	// CloseUnauthorized: the device may not connect.
	CloseUnauthorized quic.ApplicationErrorCode = 0x4
	// CloseSessionUnknown: the session cannot be resumed.
	CloseSessionUnknown quic.ApplicationErrorCode = 0x5
	// CloseProtocolError: a malformed, oversized, unknown or misdirected
	// message, or a message out of order (e.g. before the Hello).
	CloseProtocolError quic.ApplicationErrorCode = 0x10
	// CloseInternalError: the closing side failed on its own.
	CloseInternalError quic.ApplicationErrorCode = 0x11
)

// Sentinels for the close codes; errors returned by FromQUICError match
// them with errors.Is. ErrVersionUnsupported is also matched by the error
// Negotiate returns.
var (
	ErrVersionUnsupported = errors.New("protocol version unsupported")
	ErrLagging            = errors.New("server lagging")
	ErrShuttingDown       = errors.New("server shutting down")
	ErrUnauthorized       = errors.New("unauthorized")
	ErrSessionUnknown     = errors.New("session unknown")
	ErrProtocol           = errors.New("protocol error")
	ErrInternal           = errors.New("internal error")
	ErrClosedNormally     = errors.New("connection closed normally")
)

var closeSentinels = map[quic.ApplicationErrorCode]error{
	CloseNormal:             ErrClosedNormally,
	CloseVersionUnsupported: ErrVersionUnsupported,
	CloseLagging:            ErrLagging,
	CloseShuttingDown:       ErrShuttingDown,
	CloseUnauthorized:       ErrUnauthorized,
	CloseSessionUnknown:     ErrSessionUnknown,
	CloseProtocolError:      ErrProtocol,
	CloseInternalError:      ErrInternal,
}

// VersionError reports a protocol major version this side does not speak.
type VersionError struct {
	Major, Minor uint16
}

// Error implements error.
func (e *VersionError) Error() string {
	return fmt.Sprintf("meteor protocol %d.%d unsupported: this side speaks major %d (up to %d.%d)",
		e.Major, e.Minor, ProtocolMajor, ProtocolMajor, ProtocolMinor)
}

// Is matches ErrVersionUnsupported.
func (e *VersionError) Is(target error) bool { return target == ErrVersionUnsupported }

// Negotiate checks a peer's protocol version. Any minor of a known major is
// accepted (the session then runs at the lower of the two minors); another
// major yields a *VersionError whose message is fit for the close reason.
func Negotiate(major, minor uint16) error {
	if major != ProtocolMajor {
		return &VersionError{Major: major, Minor: minor}
	}
	return nil
}

// CloseError is a connection closed with a Meteor close code, by the peer
// or locally. It matches the sentinel of its code with errors.Is and
// unwraps to the *quic.ApplicationError.
type CloseError struct {
	Code   quic.ApplicationErrorCode
	Reason string
	Remote bool
	err    error
}

// Error implements error.
func (e *CloseError) Error() string {
	who := "locally"
	if e.Remote {
		who = "by peer"
	}
	msg := fmt.Sprintf("meteor connection closed %s: %s (code %#x)", who, CloseCodeName(e.Code), uint64(e.Code))
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is matches the sentinel of the close code.
func (e *CloseError) Is(target error) bool {
	s, ok := closeSentinels[e.Code]
	return ok && s == target
}

// Unwrap returns the underlying QUIC error.
func (e *CloseError) Unwrap() error { return e.err }

// CloseCodeName names a close code.
func CloseCodeName(c quic.ApplicationErrorCode) string {
	if s, ok := closeSentinels[c]; ok {
		return s.Error()
	}
	return fmt.Sprintf("unknown close code %#x", uint64(c))
}

// FromQUICError turns an error carrying a *quic.ApplicationError (as
// returned by stream and connection methods after a close) into a
// *CloseError; other errors are returned unchanged.
func FromQUICError(err error) error {
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) {
		return err
	}
	return &CloseError{Code: ae.ErrorCode, Reason: ae.ErrorMessage, Remote: ae.Remote, err: err}
}

// CloseCodeFor picks the close code and reason for closing a connection
// because of err: version errors map to CloseVersionUnsupported, framing
// and decoding errors to CloseProtocolError, a *CloseError keeps its code,
// anything else is CloseInternalError.
func CloseCodeFor(err error) (quic.ApplicationErrorCode, string) {
	var ce *CloseError
	switch {
	case err == nil:
		return CloseNormal, ""
	case errors.As(err, &ce):
		return ce.Code, ce.Reason
	case errors.Is(err, ErrVersionUnsupported):
		return CloseVersionUnsupported, err.Error()
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrFrameTooLarge),
		errors.Is(err, ErrUnknownMessage), errors.Is(err, ErrProtocol):
		return CloseProtocolError, err.Error()
	}
	return CloseInternalError, err.Error()
}
