package driver

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"strconv"

	"github.com/hashicorp/go-hclog"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// defaultFileMode is the mode of a file resource without spec.mode.
const defaultFileMode fs.FileMode = 0o644

// File is the "file" driver: a regular file with given content and mode,
// written atomically.
//
// Spec: path (absolute, resolved beneath Config.Root without following
// links out of it), exactly one of content (string) or contentBase64,
// and optional mode (octal string such as "0644", default 0644,
// permission bits only). The default and only probe reads the file back
// and compares its sha256 and mode.
type File struct {
	root   string
	logger hclog.Logger
}

// NewFile returns the file driver configured by cfg.
func NewFile(cfg Config) *File {
	cfg = cfg.withDefaults()
	return &File{root: cfg.Root, logger: cfg.Logger.Named("driver.file")}
}

// fileSpec is a parsed file spec.
type fileSpec struct {
	path    rootedPath
	content []byte
	sum     [sha256.Size]byte
	mode    fs.FileMode
}

func (d *File) parse(r intent.Resource) (fileSpec, error) {
	var s fileSpec
	p, err := requireString(r, r.Spec, "path")
	if err != nil {
		return s, err
	}
	if s.path, err = resolvePath(r, d.root, "path", p); err != nil {
		return s, err
	}
	content, hasContent, err := getString(r, r.Spec, "content")
	if err != nil {
		return s, err
	}
	b64, hasB64, err := getString(r, r.Spec, "contentBase64")
	if err != nil {
		return s, err
	}
	switch {
	case hasContent && hasB64:
		return s, specErr(r, "content and contentBase64 are mutually exclusive")
	case hasContent:
		s.content = []byte(content)
	case hasB64:
		if s.content, err = base64.StdEncoding.DecodeString(b64); err != nil {
			return s, specErr(r, "contentBase64: %v", err)
		}
	default:
		return s, specErr(r, "one of content or contentBase64 is required")
	}
	s.sum = sha256.Sum256(s.content)
	if s.mode, err = parseMode(r, "mode", defaultFileMode); err != nil {
		return s, err
	}
	return s, nil
}

// parseMode reads an octal permission string such as "0644".
func parseMode(r intent.Resource, key string, def fs.FileMode) (fs.FileMode, error) {
	m, ok, err := getString(r, r.Spec, key)
	if err != nil {
		return 0, specErr(r, "%s must be an octal string like \"0644\"", key)
	}
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseUint(m, 8, 32)
	if err != nil || n > 0o777 {
		return 0, specErr(r, "%s %q is not an octal permission between 0000 and 0777", key, m)
	}
	return fs.FileMode(n), nil
}

func formatMode(m fs.FileMode) string { return fmt.Sprintf("%04o", uint32(m.Perm())) }

// Current reads the file: Attrs "sha256" and "mode".
func (d *File) Current(ctx context.Context, r intent.Resource) (State, error) {
	s, err := d.parse(r)
	if err != nil {
		return State{}, err
	}
	fi, err := readFile(s.path, false)
	if err != nil {
		return State{}, fmt.Errorf("file resource %q: %w", r.ID, err)
	}
	if !fi.present {
		return State{}, nil
	}
	return State{Present: true, Attrs: map[string]string{
		"sha256": hex.EncodeToString(fi.sum[:]),
		"mode":   formatMode(fi.mode),
	}}, nil
}

// Diff compares content hash and mode.
func (d *File) Diff(r intent.Resource, cur State) (Diff, error) {
	s, err := d.parse(r)
	if err != nil {
		return Diff{}, err
	}
	if !cur.Present {
		return Diff{Changed: true, Reasons: []string{"file absent"}}, nil
	}
	var reasons []string
	if want := hex.EncodeToString(s.sum[:]); cur.Attrs["sha256"] != want {
		reasons = append(reasons, fmt.Sprintf("content sha256 %s, want %s", short(cur.Attrs["sha256"]), short(want)))
	}
	if want := formatMode(s.mode); cur.Attrs["mode"] != want {
		reasons = append(reasons, fmt.Sprintf("mode %s, want %s", cur.Attrs["mode"], want))
	}
	return Diff{Changed: len(reasons) > 0, Reasons: reasons}, nil
}

// Apply writes the file atomically unless it already has the desired
// content and mode, in which case it touches nothing (not even mtime).
func (d *File) Apply(ctx context.Context, r intent.Resource) error {
	s, err := d.parse(r)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("file resource %q: %w", r.ID, err)
	}
	fi, err := readFile(s.path, false)
	if err != nil {
		return fmt.Errorf("file resource %q: %w", r.ID, err)
	}
	if fi.present && fi.sum == s.sum && fi.mode == s.mode {
		d.logger.Debug("already converged", "resource", r.ID, "path", s.path.String())
		return nil
	}
	if err := writeFileAtomic(s.path, s.content, s.mode); err != nil {
		return fmt.Errorf("file resource %q: %w", r.ID, err)
	}
	d.logger.Debug("wrote file", "resource", r.ID, "path", s.path.String(), "mode", formatMode(s.mode))
	return nil
}

// Probe reads the file back and compares sha256 and mode. A file is used
// by whatever reads it, so what is on disk is the effective state.
func (d *File) Probe(ctx context.Context, r intent.Resource) (Effective, error) {
	cur, err := d.Current(ctx, r)
	if err != nil {
		if isSpecErr(err) {
			return Effective{}, err
		}
		return Effective{Result: EffectiveUnknown, Detail: err.Error()}, nil
	}
	diff, err := d.Diff(r, cur)
	if err != nil {
		return Effective{}, err
	}
	if diff.Changed {
		return Effective{Result: EffectiveMismatch, Detail: joinReasons(diff.Reasons)}, nil
	}
	return Effective{Result: EffectiveOK, Detail: "content and mode match"}, nil
}
