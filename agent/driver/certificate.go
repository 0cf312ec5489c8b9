package driver

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm/intent"
)

const (
	certFileMode fs.FileMode = 0o644
	keyFileMode  fs.FileMode = 0o600
	// defaultProbeTimeout bounds a TLS probe without probe.timeout.
	defaultProbeTimeout = 10 * time.Second
)

// Certificate is the "certificate" driver: a certificate and private key
// pair on disk, and the certificate a local TLS port actually serves.
//
// Spec: certPath and keyPath (absolute, resolved beneath Config.Root
// without following links out of it), cert and key (PEM; cert may carry
// a chain after the leaf). Apply checks that the key matches the
// certificate and writes the key (0600) and then the certificate (0644),
// each atomically; a crash between the two is seen by Current and
// repaired by the next Apply.
//
// Probe: with probe.address (host:port) and optional probe.serverName
// and probe.timeout, dial TLS without verification (only what is served
// is compared) and compare the SHA-256 fingerprint of the served leaf
// with the desired one: a new certificate on disk that the service has
// not loaded is a mismatch. Without probe.address the probe checks the
// files on disk. Either way a desired certificate that has expired or is
// not yet valid (by Config.Clock) is a mismatch.
type Certificate struct {
	root   string
	clock  Clock
	logger hclog.Logger
}

// NewCertificate returns the certificate driver configured by cfg.
func NewCertificate(cfg Config) *Certificate {
	cfg = cfg.withDefaults()
	return &Certificate{root: cfg.Root, clock: cfg.Clock, logger: cfg.Logger.Named("driver.certificate")}
}

type certSpec struct {
	certPath, keyPath rootedPath
	certPEM, keyPEM   []byte
	leaf              *x509.Certificate
	fingerprint       string // hex sha256 of the leaf DER
	certSum, keySum   [sha256.Size]byte
}

func (d *Certificate) parse(r intent.Resource) (certSpec, error) {
	var s certSpec
	for _, f := range []struct {
		key string
		dst *rootedPath
	}{{"certPath", &s.certPath}, {"keyPath", &s.keyPath}} {
		p, err := requireString(r, r.Spec, f.key)
		if err != nil {
			return s, err
		}
		if *f.dst, err = resolvePath(r, d.root, f.key, p); err != nil {
			return s, err
		}
	}
	if s.certPath == s.keyPath {
		return s, specErr(r, "certPath and keyPath must differ")
	}
	cert, err := requireString(r, r.Spec, "cert")
	if err != nil {
		return s, err
	}
	key, err := requireString(r, r.Spec, "key")
	if err != nil {
		return s, err
	}
	s.certPEM, s.keyPEM = []byte(cert), []byte(key)
	if s.leaf, err = parseLeaf(s.certPEM); err != nil {
		return s, specErr(r, "cert: %v", err)
	}
	s.fingerprint = fingerprint(s.leaf)
	s.certSum, s.keySum = sha256.Sum256(s.certPEM), sha256.Sum256(s.keyPEM)
	return s, nil
}

// parseLeaf returns the first certificate of a PEM bundle.
func parseLeaf(b []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, fmt.Errorf("no CERTIFICATE PEM block")
		}
		if block.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse certificate: %w", err)
			}
			return c, nil
		}
	}
}

func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// validity says whether c is valid at now: "valid", "expired" or
// "not yet valid".
func validity(c *x509.Certificate, now time.Time) string {
	switch {
	case now.After(c.NotAfter):
		return "expired"
	case now.Before(c.NotBefore):
		return "not yet valid"
	default:
		return "valid"
	}
}

// Current reads both files. Attrs: "fingerprint", "notBefore",
// "notAfter", "validity" of the on-disk leaf (or "parseError"), "certSha256",
// "certMode", and "keySha256", "keyMode" ("keySha256" is "absent" when the
// key file is missing). Present reports the certificate file.
func (d *Certificate) Current(ctx context.Context, r intent.Resource) (State, error) {
	s, err := d.parse(r)
	if err != nil {
		return State{}, err
	}
	cf, err := readFile(s.certPath, true)
	if err != nil {
		return State{}, fmt.Errorf("certificate resource %q: %w", r.ID, err)
	}
	kf, err := readFile(s.keyPath, false)
	if err != nil {
		return State{}, fmt.Errorf("certificate resource %q: %w", r.ID, err)
	}
	attrs := map[string]string{"keySha256": "absent"}
	if kf.present {
		attrs["keySha256"] = hex.EncodeToString(kf.sum[:])
		attrs["keyMode"] = formatMode(kf.mode)
	}
	if !cf.present {
		return State{Attrs: attrs}, nil
	}
	attrs["certSha256"] = hex.EncodeToString(cf.sum[:])
	attrs["certMode"] = formatMode(cf.mode)
	if leaf, err := parseLeaf(cf.data); err != nil {
		attrs["parseError"] = err.Error()
	} else {
		attrs["fingerprint"] = fingerprint(leaf)
		attrs["notBefore"] = leaf.NotBefore.UTC().Format(time.RFC3339)
		attrs["notAfter"] = leaf.NotAfter.UTC().Format(time.RFC3339)
		attrs["validity"] = validity(leaf, d.clock.Now())
	}
	return State{Present: true, Attrs: attrs}, nil
}

// Diff compares the files' content and modes. Validity is not a
// difference: re-applying cannot renew a certificate; Probe reports it.
func (d *Certificate) Diff(r intent.Resource, cur State) (Diff, error) {
	s, err := d.parse(r)
	if err != nil {
		return Diff{}, err
	}
	var reasons []string
	switch {
	case !cur.Present:
		reasons = append(reasons, "certificate file absent")
	case cur.Attrs["fingerprint"] == "":
		reasons = append(reasons, "certificate file unparsable: "+cur.Attrs["parseError"])
	case cur.Attrs["fingerprint"] != s.fingerprint:
		reasons = append(reasons, fmt.Sprintf("certificate fingerprint %s (not after %s), want %s",
			short(cur.Attrs["fingerprint"]), cur.Attrs["notAfter"], short(s.fingerprint)))
	case cur.Attrs["certSha256"] != hex.EncodeToString(s.certSum[:]):
		reasons = append(reasons, "certificate file differs (chain or encoding)")
	}
	if cur.Present && cur.Attrs["certMode"] != formatMode(certFileMode) {
		reasons = append(reasons, fmt.Sprintf("certificate mode %s, want %s", cur.Attrs["certMode"], formatMode(certFileMode)))
	}
	switch k := cur.Attrs["keySha256"]; {
	case k == "absent" || k == "":
		reasons = append(reasons, "key file absent")
	case k != hex.EncodeToString(s.keySum[:]):
		reasons = append(reasons, "key file differs")
	case cur.Attrs["keyMode"] != formatMode(keyFileMode):
		reasons = append(reasons, fmt.Sprintf("key mode %s, want %s", cur.Attrs["keyMode"], formatMode(keyFileMode)))
	}
	return Diff{Changed: len(reasons) > 0, Reasons: reasons}, nil
}

// Apply writes the key and the certificate, each atomically, unless both
// already match.
func (d *Certificate) Apply(ctx context.Context, r intent.Resource) error {
	s, err := d.parse(r)
	if err != nil {
		return err
	}
	if _, err := tls.X509KeyPair(s.certPEM, s.keyPEM); err != nil {
		return specErr(r, "cert and key do not form a pair: %v", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("certificate resource %q: %w", r.ID, err)
	}
	kf, err := readFile(s.keyPath, false)
	if err != nil {
		return fmt.Errorf("certificate resource %q: %w", r.ID, err)
	}
	if !kf.present || kf.sum != s.keySum || kf.mode != keyFileMode {
		if err := writeFileAtomic(s.keyPath, s.keyPEM, keyFileMode); err != nil {
			return fmt.Errorf("certificate resource %q: key: %w", r.ID, err)
		}
		d.logger.Debug("wrote key", "resource", r.ID, "path", s.keyPath.String())
	}
	cf, err := readFile(s.certPath, false)
	if err != nil {
		return fmt.Errorf("certificate resource %q: %w", r.ID, err)
	}
	if !cf.present || cf.sum != s.certSum || cf.mode != certFileMode {
		if err := writeFileAtomic(s.certPath, s.certPEM, certFileMode); err != nil {
			return fmt.Errorf("certificate resource %q: certificate: %w", r.ID, err)
		}
		d.logger.Debug("wrote certificate", "resource", r.ID, "path", s.certPath.String(), "fingerprint", short(s.fingerprint))
	}
	return nil
}

// Probe compares the served (or, without probe.address, the on-disk)
// certificate with the desired one and checks the desired one's validity.
func (d *Certificate) Probe(ctx context.Context, r intent.Resource) (Effective, error) {
	s, err := d.parse(r)
	if err != nil {
		return Effective{}, err
	}
	addr, hasAddr, err := getString(r, r.Probe, "address")
	if err != nil {
		return Effective{}, err
	}
	if !hasAddr {
		cur, err := d.Current(ctx, r)
		if err != nil {
			return Effective{Result: EffectiveUnknown, Detail: err.Error()}, nil
		}
		diff, err := d.Diff(r, cur)
		if err != nil {
			return Effective{}, err
		}
		if diff.Changed {
			return Effective{Result: EffectiveMismatch, Detail: joinReasons(diff.Reasons)}, nil
		}
		return d.checkValidity(s, "on disk")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return Effective{}, specErr(r, "probe.address %q: %v", addr, err)
	}
	serverName, _, err := getString(r, r.Probe, "serverName")
	if err != nil {
		return Effective{}, err
	}
	timeout, err := getDuration(r, r.Probe, "timeout", defaultProbeTimeout)
	if err != nil {
		return Effective{}, err
	}
	served, err := servedLeaf(ctx, addr, serverName, timeout)
	if err != nil {
		if ctx.Err() != nil {
			return Effective{}, fmt.Errorf("certificate resource %q: probe %s: %w", r.ID, addr, ctx.Err())
		}
		return Effective{Result: EffectiveUnknown, Detail: err.Error()}, nil
	}
	if fp := fingerprint(served); fp != s.fingerprint {
		return Effective{Result: EffectiveMismatch, Detail: fmt.Sprintf("served fingerprint %s (not after %s), want %s",
			short(fp), served.NotAfter.UTC().Format(time.RFC3339), short(s.fingerprint))}, nil
	}
	return d.checkValidity(s, "served by "+addr)
}

// checkValidity turns the desired certificate's validity into a result.
func (d *Certificate) checkValidity(s certSpec, where string) (Effective, error) {
	now := d.clock.Now()
	switch validity(s.leaf, now) {
	case "expired":
		return Effective{Result: EffectiveMismatch, Detail: fmt.Sprintf("certificate %s %s expired at %s",
			short(s.fingerprint), where, s.leaf.NotAfter.UTC().Format(time.RFC3339))}, nil
	case "not yet valid":
		return Effective{Result: EffectiveMismatch, Detail: fmt.Sprintf("certificate %s %s is not valid before %s",
			short(s.fingerprint), where, s.leaf.NotBefore.UTC().Format(time.RFC3339))}, nil
	}
	return Effective{Result: EffectiveOK, Detail: fmt.Sprintf("certificate %s %s, not after %s",
		short(s.fingerprint), where, s.leaf.NotAfter.UTC().Format(time.RFC3339))}, nil
}

// servedLeaf dials addr and returns the leaf certificate it serves. The
// chain is not verified: the probe compares what is served, it does not
// trust it.
func servedLeaf(ctx context.Context, addr, serverName string, timeout time.Duration) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dialer := &tls.Dialer{Config: &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // only the served certificate is compared
		ServerName:         serverName,
	}}
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("probe TLS %s: %w", addr, err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, fmt.Errorf("probe TLS %s: no certificate served", addr)
	}
	return certs[0], nil
}
