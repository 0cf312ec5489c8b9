package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/meteor-edge/meteor/wire"
)

// ReloadTLS replaces, without a restart, the cluster CA pool and this
// server's certificate on every port: Raft (accepted and dialled
// connections), the HTTP API and its requests to other servers, and the
// agent endpoint. Connections already open keep the handshake they made,
// so no agent session and no Raft stream is dropped; every handshake
// from now on uses the new material. A pool with the old and the new CA
// rotates the CA: servers and devices move to certificates of the new one
// while the old ones are still trusted (docs/operations.md).
//
// The certificate must be a server certificate of one of cas, naming this
// server's node ID; otherwise nothing changes.
func (s *Server) ReloadTLS(cas *x509.CertPool, cert tls.Certificate) error {
	if s.config.PeerTLS == nil && s.config.AgentTLS == nil {
		return errors.New("reload TLS: this server was started without a certificate; restart it with one")
	}
	leaf, err := checkServerCert(cas, cert, s.config.NodeID)
	if err != nil {
		return fmt.Errorf("reload TLS: %w", err)
	}
	cert.Leaf = leaf
	if d := s.config.DeviceCA; d != nil {
		// The CA that signs enrolled devices' certificates must stay one
		// the agent port trusts.
		if _, err := verifyChain(d.Cert, nil, cas, x509.ExtKeyUsageAny); err != nil {
			return fmt.Errorf("reload TLS: the CA pool leaves out the CA this server signs device certificates with (--ca-key-file): %w", err)
		}
	}
	if p := s.config.PeerTLS; p != nil {
		p.reload(cas, cert)
	}
	if a := s.config.AgentTLS; a != nil {
		a.live.Store(&tlsMaterial{cas: cas, cert: cert})
	}
	s.logger.Info("TLS material reloaded", "certificate_expires", leaf.NotAfter.UTC().Format(time.RFC3339), "serial", leaf.SerialNumber.String())
	return nil
}

// checkServerCert checks that cert is a server certificate of one of cas
// for node ID id, valid now for both ends of a connection, and returns its
// parsed leaf.
func checkServerCert(cas *x509.CertPool, cert tls.Certificate, id string) (*x509.Certificate, error) {
	if len(cert.Certificate) == 0 {
		return nil, errors.New("no certificate")
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parse the certificate: %w", err)
		}
	}
	got, err := wire.ServerIDFromCert(leaf)
	if err != nil {
		return nil, err
	}
	if got != id {
		return nil, fmt.Errorf("the certificate is server %q's, this server is %q", got, id)
	}
	if _, err := verifyChain(leaf, cert.Certificate[1:], cas, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, fmt.Errorf("the certificate is not one of the new CA pool's: %w", err)
	}
	return leaf, nil
}

// verifyChain verifies leaf (with intermediates, DER) against roots for
// every one of usages, at the current time.
func verifyChain(leaf *x509.Certificate, intermediates [][]byte, roots *x509.CertPool, usages ...x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	inter := x509.NewCertPool()
	for _, der := range intermediates {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		inter.AddCert(c)
	}
	var chains [][]*x509.Certificate
	for _, u := range usages {
		ch, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{u}})
		if err != nil {
			return nil, err
		}
		chains = ch
	}
	return chains, nil
}

// reloadable adapts the agent endpoint's configuration (from
// wire.ServerTLSConfig, quic-go clones it for every connection) to
// ReloadTLS: the server certificate is the one of the moment, and the
// client's chain is verified against the CA pool of the moment, as
// crypto/tls verifies it against ClientCAs (client authentication, the
// validity period), on new and on resumed connections alike. The
// configuration then names no acceptable CA, so a device presents its
// certificate whichever of the pool's CAs issued it.
func (t *AgentTLS) reloadable(conf *tls.Config) *tls.Config {
	current := func() (*x509.CertPool, tls.Certificate) {
		if m := t.live.Load(); m != nil {
			return m.cas, m.cert
		}
		return t.ClientCAs, t.Certificate
	}
	conf.Certificates = nil
	conf.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		_, cert := current()
		return &cert, nil
	}
	conf.ClientAuth = tls.RequireAnyClientCert
	conf.ClientCAs = nil
	identity := conf.VerifyConnection
	conf.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: no client certificate", wire.ErrNoIdentity)
		}
		cas, _ := current()
		var inter [][]byte
		for _, c := range cs.PeerCertificates[1:] {
			inter = append(inter, c.Raw)
		}
		if _, err := verifyChain(cs.PeerCertificates[0], inter, cas, x509.ExtKeyUsageClientAuth); err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		return identity(cs)
	}
	return conf
}
