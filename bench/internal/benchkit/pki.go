package benchkit

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// InitMeteorCA runs `meteor ca init --dir dir`: the cluster CA
// (MeteorCAFile, ca-key.pem) and the cluster secret (cluster.secret).
func InitMeteorCA(ctx context.Context, bin, dir string) error {
	return meteorCA(ctx, bin, "init", "--dir", dir)
}

// IssueMeteorServer runs `meteor ca issue-server` for server id in dir,
// a certificate for 127.0.0.1 in MeteorCertFile and MeteorKeyFile.
func IssueMeteorServer(ctx context.Context, bin, dir, id string) error {
	return meteorCA(ctx, bin, "issue-server", "--dir", dir, "--id", id, "--hosts", "127.0.0.1")
}

func meteorCA(ctx context.Context, bin string, args ...string) error {
	args = append([]string{"ca"}, args...)
	if out, err := RunCmd(ctx, bin, args...); err != nil {
		return fmt.Errorf("meteor %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// MeteorCAFile is the CA certificate in a directory made by InitMeteorCA.
func MeteorCAFile(dir string) string { return filepath.Join(dir, "ca.pem") }

// MeteorCertFile is server id's certificate in dir.
func MeteorCertFile(dir, id string) string { return filepath.Join(dir, "server-"+id+".pem") }

// MeteorKeyFile is server id's private key in dir.
func MeteorKeyFile(dir, id string) string { return filepath.Join(dir, "server-"+id+"-key.pem") }
