package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	"github.com/meteor-edge/meteor/bench/internal/wiredev"
	clusterpki "github.com/meteor-edge/meteor/cluster/pki"
)

// serverID names the server of every part (and its certificate).
const serverID = "bench"

// pki is the cluster CA, this run's server certificate and cluster secret,
// created with `meteor ca init` and `meteor ca issue-server`; the storm's
// servers get their certificates in dir as they start
// (benchkit.StartMeteor).
type pki struct {
	dir        string
	ca         *clusterpki.CA
	pool       *x509.CertPool
	serverCert tls.Certificate
	secret     []byte
}

// makePKI runs the meteor CLI to create the CA and the server certificate
// in dir, and loads them.
func makePKI(ctx context.Context, bin, dir string) (*pki, error) {
	p := &pki{dir: dir}
	if err := benchkit.InitMeteorCA(ctx, bin, dir); err != nil {
		return nil, err
	}
	if err := benchkit.IssueMeteorServer(ctx, bin, dir, serverID); err != nil {
		return nil, err
	}
	caPEM, err1 := os.ReadFile(benchkit.MeteorCAFile(dir))
	caKey, err2 := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	certPEM, err3 := os.ReadFile(benchkit.MeteorCertFile(dir, serverID))
	keyPEM, err4 := os.ReadFile(benchkit.MeteorKeyFile(dir, serverID))
	secretB64, err5 := os.ReadFile(filepath.Join(dir, "cluster.secret"))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, fmt.Errorf("read the PKI: %w", err)
	}
	var err error
	if p.ca, err = clusterpki.LoadCA(caPEM, caKey); err != nil {
		return nil, err
	}
	p.pool = p.ca.Pool()
	if p.serverCert, err = clusterpki.LoadCertificate(certPEM, keyPEM); err != nil {
		return nil, err
	}
	if p.secret, err = base64.StdEncoding.DecodeString(strings.TrimSpace(string(secretB64))); err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	return p, nil
}

// issueDevices issues one certificate per ID (wiredev.Issue).
func (p *pki) issueDevices(ids []string) ([]tls.Certificate, error) { return wiredev.Issue(p.ca, ids) }
