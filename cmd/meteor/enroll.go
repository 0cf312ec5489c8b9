package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/meteor-edge/meteor/cluster"
	"github.com/meteor-edge/meteor/cluster/pki"
)

// deviceCAFlags are the server flags of device enrollment: the CA key
// that signs enrolling and renewing devices' certificates, and their
// lifetime.
type deviceCAFlags struct {
	keyFile  string
	lifetime time.Duration
}

func (d *deviceCAFlags) register(f *pflag.FlagSet) {
	f.StringVar(&d.keyFile, "ca-key-file", "", "cluster CA private key (ca-key.pem, which --tls-dir takes if present): this server then signs the certificates of devices enrolling with a token (meteor agent --enroll) and renewing theirs")
	f.DurationVar(&d.lifetime, "device-cert-lifetime", pki.DefaultDeviceValidity, "lifetime of the device certificates this server signs; agents renew at about two thirds of it (at least 1m)")
}

// apply loads the CA key into cfg: from --ca-key-file, else from the TLS
// directory's ca-key.pem if there is one. caFile is the CA certificate.
func (d *deviceCAFlags) apply(cfg *cluster.Config, tlsDir, caFile string) error {
	if d.lifetime < time.Minute {
		return fmt.Errorf("--device-cert-lifetime %v: must be at least 1m", d.lifetime)
	}
	cfg.DeviceCertLifetime = d.lifetime
	keyFile := d.keyFile
	if keyFile == "" && tlsDir != "" {
		if p := filepath.Join(tlsDir, caKeyFile); fileExists(p) {
			keyFile = p
		}
	}
	if keyFile == "" {
		return nil
	}
	certPEM, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("--ca-key-file needs the CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("--ca-key-file: %w", err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("--ca-key-file %s with CA certificate %s: %w", keyFile, caFile, err)
	}
	cfg.DeviceCA = ca
	return nil
}
