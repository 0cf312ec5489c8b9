package driver

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// rootedPath is the location of a file or certificate resource: a clean
// relative path resolved beneath a root directory. Every read, write,
// rename, mode change and directory creation goes through an os.Root
// opened on that directory, so a symbolic link leading out of it, or an
// absolute one, fails the operation ("path escapes from parent") instead
// of being followed. Without a root the real file system is used as is.
type rootedPath struct {
	root string // absolute directory; "" means the real file system
	rel  string // clean, relative, not "." and not starting with ".."
}

// String is the path as the device sees it through the root, for
// messages and logs.
func (p rootedPath) String() string {
	if p.root == "" {
		return string(filepath.Separator) + p.rel
	}
	return filepath.Join(p.root, p.rel)
}

// dirFS is the part of *os.Root the drivers use; names are relative to
// the root directory.
type dirFS interface {
	Open(name string) (*os.File, error)
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Stat(name string) (fs.FileInfo, error)
	Mkdir(name string, perm fs.FileMode) error
	Rename(oldname, newname string) error
	Remove(name string) error
	Close() error
}

// hostFS is the real file system, for a driver without a root: names are
// taken relative to "/" and links are followed as the system does.
type hostFS struct{}

func hostPath(name string) string { return filepath.Join(string(filepath.Separator), name) }

func (hostFS) Open(name string) (*os.File, error) { return os.Open(hostPath(name)) }
func (hostFS) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(hostPath(name), flag, perm)
}
func (hostFS) Stat(name string) (fs.FileInfo, error)     { return os.Stat(hostPath(name)) }
func (hostFS) Mkdir(name string, perm fs.FileMode) error { return os.Mkdir(hostPath(name), perm) }
func (hostFS) Rename(oldname, newname string) error {
	return os.Rename(hostPath(oldname), hostPath(newname))
}
func (hostFS) Remove(name string) error { return os.Remove(hostPath(name)) }
func (hostFS) Close() error             { return nil }

// open opens the directory p is resolved beneath. With create, a missing
// root directory is created (0755) first; without, a missing root
// reports fs.ErrNotExist.
func (p rootedPath) open(create bool) (dirFS, error) {
	if p.root == "" {
		return hostFS{}, nil
	}
	r, err := os.OpenRoot(p.root)
	if errors.Is(err, fs.ErrNotExist) && create {
		if err := os.MkdirAll(p.root, 0o755); err != nil {
			return nil, fmt.Errorf("create root %s: %w", p.root, err)
		}
		r, err = os.OpenRoot(p.root)
	}
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", p.root, err)
	}
	return r, nil
}

// writeFileAtomic replaces p with data and permission perm so that a
// crash leaves either the old or the new file, never a mix: it writes a
// temporary file in the same directory, fsyncs it, sets its mode, renames
// it over p and fsyncs the directory. Missing parent directories are
// created (0755) and made durable too. A symbolic link at p itself is
// replaced, not followed.
func writeFileAtomic(p rootedPath, data []byte, perm fs.FileMode) (err error) {
	fsys, err := p.open(true)
	if err != nil {
		return err
	}
	defer fsys.Close()
	dir := filepath.Dir(p.rel)
	if err := mkdirAllSync(fsys, p, dir); err != nil {
		return err
	}
	tmpName, tmp, err := createTemp(fsys, dir, "."+filepath.Base(p.rel)+".tmp-")
	if err != nil {
		return fmt.Errorf("create temp file for %s: %w", p, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = fsys.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	// Chmod after writing: the temp file is created 0600 and the umask
	// would otherwise mask perm.
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := fsys.Rename(tmpName, p.rel); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), p, err)
	}
	return syncDir(fsys, p, dir)
}

// createTemp creates a new file dir/prefix<random> (0600, exclusive) and
// returns its name relative to the root.
func createTemp(fsys dirFS, dir, prefix string) (string, *os.File, error) {
	for range 100 {
		name := filepath.Join(dir, prefix+rand.Text()[:12])
		f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return name, f, err
	}
	return "", nil, fmt.Errorf("no unused temporary name in %s", dir)
}

// mkdirAllSync creates dir (relative to the root) and its missing
// parents, fsyncing the parent of each directory it creates so that the
// new entries survive a power loss. p names the resource in errors.
func mkdirAllSync(fsys dirFS, p rootedPath, dir string) error {
	var missing []string
	for d := dir; d != "."; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stat directory of %s: %w", p, err)
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create directory for %s: %w", p, err)
		}
		if err := syncDir(fsys, p, filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// syncDir fsyncs a directory (relative to the root) so that renames and
// creations in it are durable.
func syncDir(fsys dirFS, p rootedPath, dir string) error {
	d, err := fsys.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory of %s: %w", p, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory of %s: %w", p, err)
	}
	return nil
}

// fileInfo is what the file and certificate drivers observe of a file.
type fileInfo struct {
	present bool
	mode    fs.FileMode // permission bits
	sum     [sha256.Size]byte
	data    []byte // only when readFile was asked to keep it
}

// readFile stats and hashes p. A missing file (or root) is not an error.
// When keep is true the content is returned too.
func readFile(p rootedPath, keep bool) (fileInfo, error) {
	fsys, err := p.open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return fileInfo{}, nil
	}
	if err != nil {
		return fileInfo{}, err
	}
	defer fsys.Close()
	f, err := fsys.Open(p.rel)
	if errors.Is(err, fs.ErrNotExist) {
		return fileInfo{}, nil
	}
	if err != nil {
		return fileInfo{}, fmt.Errorf("open %s: %w", p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileInfo{}, fmt.Errorf("stat %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return fileInfo{}, fmt.Errorf("%s is not a regular file (%s)", p, st.Mode().Type())
	}
	h := sha256.New()
	var buf bytes.Buffer
	w := io.Writer(h)
	if keep {
		w = io.MultiWriter(h, &buf)
	}
	if _, err := io.Copy(w, f); err != nil {
		return fileInfo{}, fmt.Errorf("read %s: %w", p, err)
	}
	fi := fileInfo{present: true, mode: st.Mode().Perm(), data: buf.Bytes()}
	h.Sum(fi.sum[:0])
	return fi, nil
}
