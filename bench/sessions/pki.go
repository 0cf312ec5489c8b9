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
	"runtime"
	"strings"
	"sync"

	"github.com/meteor-edge/meteor/bench/internal/benchkit"
	clusterpki "github.com/meteor-edge/meteor/cluster/pki"
)

// serverID names the server of every part (and its certificate).
const serverID = "bench"

// pki is the cluster CA, this run's server certificate and cluster secret,
// created with `meteor ca init` and `meteor ca issue-server`.
type pki struct {
	dir        string
	ca         *clusterpki.CA
	pool       *x509.CertPool
	serverCert tls.Certificate
	secret     []byte
}

func (p *pki) caFile() string     { return filepath.Join(p.dir, "ca.pem") }
func (p *pki) certFile() string   { return p.serverCertFile(serverID) }
func (p *pki) keyFile() string    { return p.serverKeyFile(serverID) }
func (p *pki) secretFile() string { return filepath.Join(p.dir, "cluster.secret") }

func (p *pki) serverCertFile(id string) string { return filepath.Join(p.dir, "server-"+id+".pem") }
func (p *pki) serverKeyFile(id string) string  { return filepath.Join(p.dir, "server-"+id+"-key.pem") }

// issueServer runs `meteor ca issue-server` for server id, whose files
// are then serverCertFile(id) and serverKeyFile(id).
func (p *pki) issueServer(ctx context.Context, bin, id string) error {
	args := []string{"ca", "issue-server", "--dir", p.dir, "--id", id, "--hosts", "127.0.0.1"}
	if out, err := benchkit.RunCmd(ctx, bin, args...); err != nil {
		return fmt.Errorf("meteor %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// makePKI runs the meteor CLI to create the CA and the server certificate
// in dir, and loads them.
func makePKI(ctx context.Context, bin, dir string) (*pki, error) {
	p := &pki{dir: dir}
	if out, err := benchkit.RunCmd(ctx, bin, "ca", "init", "--dir", dir); err != nil {
		return nil, fmt.Errorf("meteor ca init --dir %s: %w\n%s", dir, err, out)
	}
	if err := p.issueServer(ctx, bin, serverID); err != nil {
		return nil, err
	}
	caPEM, err1 := os.ReadFile(p.caFile())
	caKey, err2 := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	certPEM, err3 := os.ReadFile(p.certFile())
	keyPEM, err4 := os.ReadFile(p.keyFile())
	secretB64, err5 := os.ReadFile(p.secretFile())
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

// issueDevices issues one certificate per ID (ECDSA P-256), on every CPU.
func (p *pki) issueDevices(ids []string) ([]tls.Certificate, error) {
	certs := make([]tls.Certificate, len(ids))
	errs := make([]error, runtime.NumCPU())
	var wg sync.WaitGroup
	for w := range len(errs) {
		wg.Go(func() {
			for i := w; i < len(ids); i += len(errs) {
				c, err := p.ca.IssueDevice(ids[i])
				if err != nil {
					errs[w] = err
					return
				}
				certs[i] = c
			}
		})
	}
	wg.Wait()
	return certs, errors.Join(errs...)
}
