package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meteor-edge/meteor/wire"
)

// PeerTLS is what servers prove themselves to each other with: the
// cluster CA and this server's certificate (pki.CA.IssueServer), which
// names its node ID (wire.ServerIDFromCert) and is valid for both ends of
// a connection.
//
// CAs and Certificate are the material a server starts with; Server.
// ReloadTLS replaces it at run time (current), for every connection made
// or accepted from then on.
type PeerTLS struct {
	CAs         *x509.CertPool
	Certificate tls.Certificate

	live atomic.Pointer[tlsMaterial] // set by reload; nil: CAs, Certificate
}

// tlsMaterial is a CA pool and a certificate, swapped as one.
type tlsMaterial struct {
	cas  *x509.CertPool
	cert tls.Certificate
}

// current returns the CA pool and the certificate in use.
func (p *PeerTLS) current() (*x509.CertPool, tls.Certificate) {
	if m := p.live.Load(); m != nil {
		return m.cas, m.cert
	}
	return p.CAs, p.Certificate
}

// reload makes cas and cert the material of every connection from now on.
func (p *PeerTLS) reload(cas *x509.CertPool, cert tls.Certificate) {
	p.live.Store(&tlsMaterial{cas: cas, cert: cert})
}

// ErrWrongPeer reports a peer whose certificate is not that of the server
// expected at its address.
var ErrWrongPeer = errors.New("peer is not the expected server")

// serverConfig accepts only clients with a server certificate of the
// cluster CA.
func (p *PeerTLS) serverConfig() *tls.Config {
	cas, cert := p.current()
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    cas,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := peerServerID(cs)
			return err
		},
	}
}

// clientConfig trusts only servers of the cluster CA and, if wantID is
// set, only the server with that node ID.
func (p *PeerTLS) clientConfig(wantID string) *tls.Config {
	cas, cert := p.current()
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      cas,
		ServerName:   wire.ClusterServerName,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := peerServerID(cs)
			if err != nil {
				return err
			}
			if wantID != "" && id != wantID {
				return fmt.Errorf("%w: its certificate names %q, not %q", ErrWrongPeer, id, wantID)
			}
			return nil
		},
	}
}

// peerServerID returns the node ID of a verified peer's certificate.
func peerServerID(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: no certificate", wire.ErrNoIdentity)
	}
	return wire.ServerIDFromCert(cs.PeerCertificates[0])
}

// tlsLayer runs Raft over mutual TLS on top of another stream layer
// (plain TCP, or a fault-injecting one in tests). Both ends must present a
// server certificate of the cluster CA; a dialled server must present the
// certificate of the node ID the Raft configuration has at that address,
// once the Raft node is running (watch), and an explicitly verified one
// that of the ID it was verified for.
type tlsLayer struct {
	raft.StreamLayer
	tls *PeerTLS

	// config reads the Raft node's latest configuration; nil until the
	// node runs (raft's dials start inside raft.NewRaft).
	config atomic.Pointer[configSource]
}

// configSource is the Raft node's configuration (*raft.Raft; reading it
// does not wait for Raft's main loop).
type configSource interface {
	GetConfiguration() raft.ConfigurationFuture
}

// handshakeTimeout bounds a TLS handshake between servers.
const handshakeTimeout = 10 * time.Second

func newTLSLayer(inner raft.StreamLayer, p *PeerTLS) *tlsLayer {
	return &tlsLayer{StreamLayer: inner, tls: p}
}

// Accept returns the next connection; its handshake (and the check of the
// peer's certificate) happens on its first read, in the goroutine Raft
// serves it on, so that a slow or hostile client cannot stall the others.
func (l *tlsLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.tls.serverConfig()), nil
}

// Dial connects to the server at addr and completes the handshake, so a
// peer that is not the expected server fails the dial.
func (l *tlsLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return l.dial(addr, l.expected(addr), timeout)
}

func (l *tlsLayer) dial(addr raft.ServerAddress, wantID string, timeout time.Duration) (net.Conn, error) {
	c, err := l.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, l.tls.clientConfig(wantID))
	tc.SetDeadline(time.Now().Add(min(timeout, handshakeTimeout)))
	if err := tc.Handshake(); err != nil {
		tc.Close()
		return nil, fmt.Errorf("raft TLS handshake with %s: %w", addr, err)
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// verify dials addr and checks that the server there holds the
// certificate of node ID id. A server is added to the Raft configuration
// only after this; from then on Dial expects that ID at addr.
func (l *tlsLayer) verify(addr raft.ServerAddress, id string) error {
	c, err := l.dial(addr, id, handshakeTimeout)
	if err != nil {
		return err
	}
	return c.Close()
}

// watch makes Dial expect, at each address, the node ID of the Raft
// configuration src holds.
func (l *tlsLayer) watch(src configSource) { l.config.Store(&src) }

// expected returns the node ID the configuration has at addr, or "" (any
// server of the cluster) if it has none or the node is not running yet.
func (l *tlsLayer) expected(addr raft.ServerAddress) string {
	src := l.config.Load()
	if src == nil {
		return ""
	}
	f := (*src).GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	for _, s := range f.Configuration().Servers {
		if s.Address == addr {
			return string(s.ID)
		}
	}
	return ""
}

// apiProtos are the protocols the HTTP API offers over TLS: HTTP/2
// first, which the servers use among themselves (apiTransport), and
// HTTP/1.1 for clients without it and servers of earlier releases.
var apiProtos = []string{"h2", "http/1.1"}

// apiServerConfig is the TLS configuration of the HTTP API of a server
// with PeerTLS. Operators connect without a certificate (they prove
// themselves with a token); a client that presents one must present a
// server certificate of the cluster CA, so a device certificate is
// refused at the handshake. The internal endpoints and the requests
// servers forward to each other require that certificate (peerServerOf).
func (p *PeerTLS) apiServerConfig() *tls.Config {
	conf := func() *tls.Config {
		cas, cert := p.current()
		return &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.VerifyClientCertIfGiven,
			ClientCAs:    cas,
			NextProtos:   apiProtos,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return nil
				}
				_, err := peerServerID(cs)
				return err
			},
		}
	}
	// Each handshake takes the material of the moment (reload).
	outer := conf()
	outer.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return conf(), nil }
	return outer
}

// apiMaxStreams is how many requests one HTTP/2 connection to the API
// carries at once (the Go server's default is 250). A server forwards the
// reports of every session it holds to their owners as soon as a change
// lands, each request held open until the owner commits it: thousands at
// once on a large fleet. Past the limit the client opened connections of
// its own, a TLS handshake on both servers each, in the middle of the
// change (5.3 % of the servers' CPU in a fan-out to 10,000 devices,
// docs/performance.md).
const apiMaxStreams = 8192

// apiHTTP2 is the HTTP/2 configuration of a server's HTTP API.
func apiHTTP2() *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: apiMaxStreams}
}

// apiTransport is the transport of a server's requests to the other
// servers' HTTP APIs: it presents this server's certificate and trusts
// only servers of the cluster CA.
func (p *PeerTLS) apiTransport() *http.Transport {
	// Reconnections resume their TLS session (no signature, no chain to
	// verify again), with the tickets of this transport's cache.
	//
	// Requests go over HTTP/2 where the other server offers it: many
	// requests at once share a connection (a server that holds thousands
	// of sessions forwards their reports at once after a change; over
	// HTTP/1.1 each request in flight took a connection of its own, and
	// those beyond the idle pool were closed after the burst and opened
	// again with a handshake at the next: 8.9 % of the servers' CPU in a
	// fan-out to 10,000 devices, docs/performance.md).
	sessions := tls.NewLRUClientSessionCache(64)
	return &http.Transport{
		// Each connection takes the material of the moment (reload).
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conf := p.clientConfig("")
			conf.ClientSessionCache = sessions
			conf.NextProtos = apiProtos
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: handshakeTimeout}, Config: conf}
			return d.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: handshakeTimeout,
	}
}

// peerServerOf returns the node ID of the server certificate r's client
// presented over TLS, or "" if the request came without one (or without
// TLS).
func peerServerOf(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	id, err := peerServerID(*r.TLS)
	if err != nil {
		return ""
	}
	return id
}

// OperatorTLS returns the TLS configuration with which an operator's
// client trusts the servers of the cluster whose CA is cas: any server
// certificate of that CA, whatever address it was reached at (every
// server certificate names wire.ClusterServerName), and nothing else.
func OperatorTLS(cas *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    cas,
		ServerName: wire.ClusterServerName,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := peerServerID(cs)
			return err
		},
	}
}
