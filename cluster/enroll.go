package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/quic-go/quic-go"
	"golang.org/x/time/rate"

	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
	"github.com/meteor-edge/meteor/wire"
)

// Device enrollment and certificate renewal (docs/security.md, "Device
// enrollment" and "Device certificate rotation"; docs/wire.md,
// "Enrollment"). They are served on the agents' QUIC port under their own
// ALPN, wire.EnrollALPN: the agent port's TLS configuration hands a
// ClientHello offering it the enrollment configuration
// (wire.EnrollServerTLSConfig, client certificate optional), and every
// other ClientHello the session configuration unchanged, which requires
// and verifies a device certificate.

// enrollIOTimeout bounds the wait for an enrollment request and for the
// agent to take the answer.
const enrollIOTimeout = 10 * time.Second

// enroller signs device certificate requests: for a new device with an
// enrollment token, whose use is committed through Raft before anything
// is signed, and for an enrolled device renewing the certificate it
// presents.
type enroller struct {
	logger hclog.Logger
	clock  Clock
	state  stateReader
	// propose commits the token's use; nil means this server cannot.
	propose proposer
	// ca signs; nil means this server holds no CA key.
	ca       *pki.CA
	validity time.Duration
	timeout  time.Duration
	// unknown budgets the commits of tokens this replica does not know.
	unknown *rate.Limiter
}

func newEnroller(cfg *Config, deps agentDeps) *enroller {
	e := &enroller{
		logger: deps.logger.Named("enroll"), clock: deps.clock, state: deps.state,
		ca: cfg.DeviceCA, validity: cfg.DeviceCertLifetime, timeout: cfg.ApplyTimeout,
		unknown: rate.NewLimiter(rate.Every(time.Second), 5),
	}
	// The session recorder commits through the server's proposer; the
	// token's use goes the same way.
	if r, ok := deps.records.(*sessionRecorder); ok {
		e.propose = r.propose
	}
	return e
}

// configForClient is the agent port's tls.Config.GetConfigForClient:
// the enrollment configuration for a ClientHello offering
// wire.EnrollALPN, base itself (nil) for every other.
//
// base verifies client chains itself, against the CA pool of the moment
// (AgentTLS.reloadable); the enrollment configuration keeps that check
// for a client that presents a certificate (a renewal), and takes one
// without.
func configForClient(base *tls.Config) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	verify := base.VerifyConnection
	return func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if !wire.OffersEnroll(hello) {
			return nil, nil
		}
		c := wire.EnrollServerTLSConfig(base)
		c.ClientAuth = tls.RequestClientCert
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil
			}
			return verify(cs)
		}
		return c, nil
	}
}

// isEnrollConn reports whether conn negotiated wire.EnrollALPN.
func isEnrollConn(conn *quic.Conn) bool {
	return conn.ConnectionState().TLS.NegotiatedProtocol == wire.EnrollALPN
}

// serveEnroll serves one enrollment connection: one stream, one request,
// one answer. Malformed input closes the connection with a protocol
// error.
func (a *agentServer) serveEnroll(ctx context.Context, conn *quic.Conn) {
	ctx, cancel := context.WithTimeout(ctx, enrollIOTimeout+a.cfg.ApplyTimeout)
	defer cancel()
	log := a.logger.Named("enroll").With("remote", conn.RemoteAddr().String())
	select {
	case <-conn.HandshakeComplete():
	case <-ctx.Done():
		conn.CloseWithError(wire.CloseShuttingDown, "handshake not completed")
		return
	}
	str, err := conn.AcceptStream(ctx)
	if err != nil {
		conn.CloseWithError(wire.CloseProtocolError, "no enrollment stream")
		return
	}
	str.SetReadDeadline(time.Now().Add(enrollIOTimeout))
	req, err := wire.ReadEnrollRequest(str)
	if err != nil {
		code, reason := wire.CloseCodeFor(err)
		if errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrFrameTooLarge) {
			code = wire.CloseProtocolError
		}
		log.Warn("bad enrollment request", "error", err)
		conn.CloseWithError(code, reason)
		return
	}
	var peer *x509.Certificate
	if pcs := conn.ConnectionState().TLS.PeerCertificates; len(pcs) > 0 {
		peer = pcs[0]
	}
	ans := a.enroll.answer(ctx, req, peer)
	if ans.Status != wire.EnrollOK {
		log.Warn("enrollment refused", "kind", req.Kind, "status", ans.Status, "reason", ans.Reason)
	}
	str.SetWriteDeadline(time.Now().Add(enrollIOTimeout))
	if err := wire.WriteEnrollAnswer(str, ans); err != nil {
		conn.CloseWithError(wire.CloseInternalError, "write enrollment answer")
		return
	}
	str.Close()
	// The agent closes once it has the answer; closing first could drop
	// the answer's last packets.
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
	}
	conn.CloseWithError(wire.CloseNormal, "")
}

// answer decides an enrollment or renewal request. peer is the verified
// client certificate, if the agent presented one.
func (e *enroller) answer(ctx context.Context, req *wire.EnrollRequest, peer *x509.Certificate) *wire.EnrollAnswer {
	refuse := func(s wire.EnrollStatus, format string, args ...any) *wire.EnrollAnswer {
		return &wire.EnrollAnswer{Status: s, Reason: fmt.Sprintf(format, args...)}
	}
	if e.ca == nil {
		return refuse(wire.EnrollUnavailable, "this server holds no CA key and cannot sign device certificates: "+
			"start it with --ca-key-file (or a --tls-dir holding ca-key.pem), or enroll through a server that has it")
	}
	csr, err := pki.ParseDeviceCSR(req.CSR)
	if err != nil {
		return refuse(wire.EnrollBadRequest, "%v", err)
	}
	id := csr.DeviceID
	log := e.logger.With("device", id)
	read := e.state.Read()
	if revoked, _, err := read.DeviceRevoked(nil, id); err != nil {
		return refuse(wire.EnrollUnavailable, "%v", err)
	} else if revoked {
		return refuse(wire.EnrollRefused, "device %q is revoked", id)
	}
	switch req.Kind {
	case wire.EnrollRenew:
		if peer == nil {
			return refuse(wire.EnrollRefused, "a renewal needs the device's current certificate")
		}
		cur, err := wire.DeviceIDFromCert(peer)
		if err != nil || cur != id {
			return refuse(wire.EnrollRefused, "the certificate presented is for %q, the request for %q: a device renews only its own certificate", cur, id)
		}
	case wire.EnrollWithToken:
		if err := acl.CheckSecretFormat(req.Token); err != nil {
			return refuse(wire.EnrollRefused, "enrollment token: %v", err)
		}
		// A device the servers know already (it connected with a
		// certificate issued before) is not handed to whoever holds a
		// token; the state machine refuses a device with control-plane
		// labels atomically, this covers one that has none.
		if _, err := read.Device(nil, id); err == nil {
			return refuse(wire.EnrollRefused, "device %q is known already: enroll under a new device ID, or revoke or delete the old one first", id)
		} else if !errors.Is(err, fsm.ErrNotFound) {
			return refuse(wire.EnrollUnavailable, "%v", err)
		}
		// Checked on the replica first, so that only a valid token's
		// holder makes the servers commit freely (a token that is
		// expired, used up or not an enroll token here stays so); the
		// state machine checks again, atomically.
		hash := acl.HashSecret(req.Token)
		tok, err := read.TokenBySecretHash(nil, hash)
		switch {
		case errors.Is(err, fsm.ErrNotFound):
			// Unknown here: revoked, never created, or created so
			// lately that this replica has not applied it yet. Only the
			// state machine can tell; ask it within a small budget, so
			// that made-up tokens cannot fill the Raft log.
			if !e.unknown.AllowN(e.clock.Now(), 1) {
				return refuse(wire.EnrollUnavailable, "this server does not know the enrollment token (yet): try again shortly")
			}
		case err != nil:
			return refuse(wire.EnrollUnavailable, "%v", err)
		case tok.Policy != acl.PolicyEnroll:
			return refuse(wire.EnrollRefused, "a %s token cannot enroll devices: create one with meteor token create --policy enroll", tok.Policy)
		case tok.Expired(e.clock.Now().UnixNano()):
			return refuse(wire.EnrollRefused, "enrollment token %s: %v", tok.Accessor, fsm.ErrTokenExpired)
		case tok.Exhausted():
			return refuse(wire.EnrollRefused, "enrollment token %s: %v (used %d of %d)", tok.Accessor, fsm.ErrTokenExhausted, tok.Uses, tok.MaxUses)
		}
		if e.propose == nil {
			return refuse(wire.EnrollUnavailable, "this server cannot commit enrollments")
		}
		actx, cancel := context.WithTimeout(ctx, e.timeout)
		res, _, err := e.propose.apply(actx, fsm.UseEnrollTokenType, &fsm.UseEnrollTokenRequest{
			SecretHash: hash, Device: id, Time: e.clock.Now().UnixNano(),
		})
		cancel()
		switch {
		case err != nil:
			return refuse(wire.EnrollUnavailable, "commit the enrollment: %v", err)
		case res.Err != nil:
			return refuse(wire.EnrollRefused, "%v", res.Err)
		}
		log.Info("device enrolled", "labels", res.Labels)
	default:
		return refuse(wire.EnrollBadRequest, "unknown request kind %d", req.Kind)
	}
	cert, err := e.ca.SignDeviceCSR(csr, e.clock.Now(), e.validity)
	if err != nil {
		log.Error("sign device certificate", "error", err)
		return refuse(wire.EnrollUnavailable, "%v", err)
	}
	log.Info("device certificate issued", "kind", req.Kind, "not_after", cert.NotAfter)
	return &wire.EnrollAnswer{Status: wire.EnrollOK, Certificates: [][]byte{cert.Raw, e.ca.Cert.Raw}}
}
