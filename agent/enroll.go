package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/quic-go/quic-go"

	"github.com/meteor-edge/meteor/cluster/pki"
	"github.com/meteor-edge/meteor/wire"
)

// Files of an enrolled agent's data dir, each written with mode 0600 by an
// atomic, fsynced replace.
const (
	// DeviceCertFile holds the device certificate and its private key in
	// PEM: one file, so a renewal replaces both at once.
	DeviceCertFile = "device.pem"
	// EnrollCAFile holds the CA certificate the server answered with.
	EnrollCAFile = "ca.pem"
	// enrollKeyFile holds the key of an enrollment under way, so an agent
	// restarted before the answer sends a request for the same key.
	enrollKeyFile = "enroll-key.pem"
)

// EnrollConfig configures LoadOrEnroll.
type EnrollConfig struct {
	// DataDir is the agent's data dir (Config.DataDir); the certificate
	// is kept in it. Created 0700 when missing.
	DataDir string
	// DeviceID is the ID to enroll under; a certificate found in DataDir
	// must name it.
	DeviceID string
	// Token is the enrollment token's secret. Empty: only load.
	Token string
	// Servers and RootCAs as in Config.
	Servers []string
	RootCAs *x509.CertPool
	// ListenPacket and QUIC as in Config.
	ListenPacket func() (net.PacketConn, error)
	QUIC         *quic.Config
	// DialTimeout bounds each server's try; zero means
	// wire.HandshakeIdleTimeout.
	DialTimeout time.Duration
	// Now is the clock certificates are judged by; nil means time.Now.
	Now    func() time.Time
	Logger hclog.Logger
}

// ErrNoCertificate reports a data dir without a usable device certificate
// and no enrollment token to get one.
var ErrNoCertificate = errors.New("no usable device certificate")

// LoadOrEnroll returns the device certificate kept in cfg.DataDir if it is
// valid (it names cfg.DeviceID, is signed by cfg.RootCAs and has not
// expired): then cfg.Token is ignored. Otherwise, with a token, it
// enrolls: it generates an ECDSA P-256 key on the device, which never
// leaves it, sends a certificate request with the token to one server
// after the other until one answers, and stores the certificate and the
// CA. A refusal (bad, expired, used up or revoked token, revoked or known
// device) is final and writes no certificate.
func LoadOrEnroll(ctx context.Context, cfg EnrollConfig) (tls.Certificate, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	log := cfg.Logger.Named("enroll").With("device", cfg.DeviceID)
	if err := wire.ValidDeviceID(cfg.DeviceID); err != nil {
		return tls.Certificate{}, fmt.Errorf("enroll: device ID: %w", err)
	}
	if cfg.RootCAs == nil || len(cfg.Servers) == 0 {
		return tls.Certificate{}, errors.New("enroll: the cluster CA and at least one server are needed")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return tls.Certificate{}, fmt.Errorf("enroll: data dir: %w", err)
	}
	cert, err := loadDeviceCert(cfg.DataDir, cfg.DeviceID, cfg.RootCAs, cfg.Now())
	switch {
	case err == nil:
		return cert, nil
	case cfg.Token == "":
		return tls.Certificate{}, fmt.Errorf("%w in %s (%v): enroll with a token (meteor agent --enroll)", ErrNoCertificate, cfg.DataDir, err)
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errCertExpired):
		return tls.Certificate{}, err
	}
	key, err := enrollmentKey(cfg.DataDir)
	if err != nil {
		return tls.Certificate{}, err
	}
	listen := cfg.ListenPacket
	if listen == nil {
		listen = defaultListener(cfg.Servers)
	}
	pc, err := listen()
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("enroll: open socket: %w", err)
	}
	defer pc.Close()
	tr := &quic.Transport{Conn: pc}
	defer tr.Close()
	c := certClient{tr: tr, roots: cfg.RootCAs, quic: cfg.QUIC, timeout: cfg.DialTimeout}
	req := &wire.EnrollRequest{Kind: wire.EnrollWithToken, Token: cfg.Token}
	cert, caDER, err := c.request(ctx, cfg.Servers, nil, req, cfg.DeviceID, key, log)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := storeDeviceCert(cfg.DataDir, cert, caDER); err != nil {
		return tls.Certificate{}, err
	}
	if err := os.Remove(filepath.Join(cfg.DataDir, enrollKeyFile)); err != nil {
		log.Warn("remove the enrollment key", "error", err)
	}
	log.Info("enrolled", "not_after", cert.Leaf.NotAfter)
	return cert, nil
}

var errCertExpired = errors.New("device certificate expired")

// loadDeviceCert reads DeviceCertFile and checks it.
func loadDeviceCert(dir, deviceID string, roots *x509.CertPool, now time.Time) (tls.Certificate, error) {
	path := filepath.Join(dir, DeviceCertFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := pki.LoadCertificate(b, b)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", path, err)
	}
	id, err := certDeviceID(cert)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", path, err)
	}
	if id != deviceID {
		return tls.Certificate{}, fmt.Errorf("%s is the certificate of device %q, not of %q: use its data dir with its device ID", path, id, deviceID)
	}
	if !now.Before(cert.Leaf.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("%s: %w at %v", path, errCertExpired, cert.Leaf.NotAfter)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return tls.Certificate{}, fmt.Errorf("%s is not a device certificate of this cluster's CA: %w", path, err)
	}
	return cert, nil
}

// enrollmentKey returns the key of an enrollment under way, or a new one
// written to enrollKeyFile first.
func enrollmentKey(dir string) (*ecdsa.PrivateKey, error) {
	path := filepath.Join(dir, enrollKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		blk, _ := pem.Decode(b)
		if blk != nil {
			if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
				if ek, ok := k.(*ecdsa.PrivateKey); ok && ek.Curve == elliptic.P256() {
					return ek, nil
				}
			}
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("enroll: generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("enroll: encode key: %w", err)
	}
	if err := writePrivate(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return nil, err
	}
	return key, nil
}

// storeDeviceCert writes the certificate and key, then the CA.
func storeDeviceCert(dir string, cert tls.Certificate, caDER []byte) error {
	certPEM, keyPEM, err := pki.CertificatePEM(cert)
	if err != nil {
		return err
	}
	if err := writePrivate(filepath.Join(dir, DeviceCertFile), append(certPEM, keyPEM...)); err != nil {
		return err
	}
	return writePrivate(filepath.Join(dir, EnrollCAFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
}

// writePrivate replaces path with b, mode 0600: a temporary file in the
// same directory, fsynced, renamed over path, and the directory fsynced,
// so a crash leaves the old file or the new one.
func writePrivate(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: sync dir: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync dir: %w", path, err)
	}
	return nil
}

// certClient sends enrollment and renewal requests (wire.EnrollALPN).
type certClient struct {
	tr      *quic.Transport
	roots   *x509.CertPool
	quic    *quic.Config
	timeout time.Duration
}

// request sends req with a certificate request for key to the servers in
// turn, presenting current (nil: no certificate), until one signs or
// refuses; a server that cannot sign now (or cannot be reached) passes
// the turn to the next. It checks what comes back: a device certificate
// for deviceID and key, signed by roots.
func (c *certClient) request(ctx context.Context, servers []string, current *tls.Certificate, req *wire.EnrollRequest,
	deviceID string, key *ecdsa.PrivateKey, log hclog.Logger) (tls.Certificate, []byte, error) {
	csr, err := pki.NewDeviceCSR(deviceID, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	req.CSR = csr
	var errs []error
	for _, addr := range servers {
		ans, err := c.exchange(ctx, addr, current, req)
		if err == nil {
			err = ans.Err()
		}
		var ee *wire.EnrollError
		if errors.As(err, &ee) && ee.Status != wire.EnrollUnavailable {
			return tls.Certificate{}, nil, fmt.Errorf("server %s: %w", addr, err)
		}
		if err != nil {
			log.Warn("certificate request failed, trying the next server", "server_addr", addr, "error", err)
			errs = append(errs, fmt.Errorf("server %s: %w", addr, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		cert, err := checkIssued(ans.Certificates, deviceID, key, c.roots)
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("server %s: %w", addr, err)
		}
		return cert, ans.Certificates[1], nil
	}
	return tls.Certificate{}, nil, fmt.Errorf("no server signed the certificate request: %w", errors.Join(errs...))
}

// exchange sends one request to one server and reads its answer.
func (c *certClient) exchange(ctx context.Context, addr string, current *tls.Certificate, req *wire.EnrollRequest) (*wire.EnrollAnswer, error) {
	udp, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	timeout := c.timeout
	if timeout <= 0 {
		timeout = wire.HandshakeIdleTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, 2*timeout)
	defer cancel()
	qc := c.quic
	if qc == nil {
		qc = wire.ClientQUICConfig()
	}
	conn, err := c.tr.Dial(ctx, udp, wire.EnrollClientTLSConfig(c.roots, current, wire.ClusterServerName), qc)
	if err != nil {
		return nil, err
	}
	defer conn.CloseWithError(wire.CloseNormal, "")
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, wire.FromQUICError(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		str.SetDeadline(dl)
	}
	if err := wire.WriteEnrollRequest(str, req); err != nil {
		return nil, wire.FromQUICError(err)
	}
	str.Close()
	ans, err := wire.ReadEnrollAnswer(str)
	if err != nil {
		return nil, wire.FromQUICError(err)
	}
	return ans, nil
}

// checkIssued checks an answer's certificates and returns the device's.
func checkIssued(ders [][]byte, deviceID string, key *ecdsa.PrivateKey, roots *x509.CertPool) (tls.Certificate, error) {
	leaf, err := x509.ParseCertificate(ders[0])
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issued certificate: %w", err)
	}
	if _, err := x509.ParseCertificate(ders[1]); err != nil {
		return tls.Certificate{}, fmt.Errorf("CA certificate: %w", err)
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return tls.Certificate{}, errors.New("the issued certificate is not for this device's key")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return tls.Certificate{}, fmt.Errorf("the issued certificate is not signed by the cluster CA: %w", err)
	}
	if id, err := wire.DeviceIDFromCert(leaf); err != nil || id != deviceID {
		return tls.Certificate{}, fmt.Errorf("the issued certificate names %q (%v), not %q", id, err, deviceID)
	}
	return tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// --- rotation ---

// renewAt returns when to renew cert: at two thirds of its lifetime, less
// a jitter of up to a tenth of it, so a fleet enrolled together does not
// renew together.
func renewAt(leaf *x509.Certificate, rng *mrand.Rand) time.Time {
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	at := leaf.NotBefore.Add(life * 2 / 3)
	if j := int64(life / 10); j > 0 {
		at = at.Add(-time.Duration(rng.Int64N(j)))
	}
	return at
}

// renewLoop renews the agent's certificate before it expires, for a new
// key generated here, authenticated by the current certificate, until
// ctx ends. The new certificate replaces DeviceCertFile atomically and is
// used from the next connection on; the session in progress goes on.
func (a *Agent) renewLoop(ctx context.Context, tr *quic.Transport, cm *connManager) {
	log := a.log.Named("renew")
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 0x72656e6577))
	c := certClient{tr: tr, roots: a.cfg.RootCAs, quic: a.cfg.QUIC, timeout: a.cfg.DialTimeout}
	retry := time.Duration(0)
	for {
		cur := a.cert.Load()
		wait := renewAt(cur.Leaf, rng).Sub(a.cfg.Clock.Now())
		if retry > 0 {
			wait = retry
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-a.cfg.Clock.After(wait):
			}
		}
		if ctx.Err() != nil {
			return
		}
		err := a.renew(ctx, &c, cur, cm)
		if err == nil {
			retry = 0
			continue
		}
		// Retry well before expiry: a tenth of what is left, between a
		// second and a minute.
		left := cur.Leaf.NotAfter.Sub(a.cfg.Clock.Now())
		retry = min(max(left/10, a.cfg.BackoffMin, time.Second), time.Minute)
		log.Error("renew the device certificate", "error", err, "expires", cur.Leaf.NotAfter, "retry_in", retry)
	}
}

func (a *Agent) renew(ctx context.Context, c *certClient, cur *tls.Certificate, cm *connManager) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	servers := a.cfg.Servers
	if s := a.st.snapshot().Server; s != "" {
		servers = append([]string{s}, servers...)
	}
	cert, caDER, err := c.request(ctx, servers, cur, &wire.EnrollRequest{Kind: wire.EnrollRenew}, a.deviceID, key, a.log)
	if err != nil {
		return err
	}
	if err := storeDeviceCert(a.cfg.CertificateDir, cert, caDER); err != nil {
		return err
	}
	a.cert.Store(&cert)
	// Tickets carry the old certificate; the next connection makes a
	// full handshake with the new one.
	cm.tickets.reset()
	a.log.Info("device certificate renewed", "not_after", cert.Leaf.NotAfter)
	return nil
}
