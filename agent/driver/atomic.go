package driver

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// writeFileAtomic replaces path with data and permission perm so that a
// crash leaves either the old or the new file, never a mix: it writes a
// temporary file in the same directory, fsyncs it, sets its mode, renames
// it over path and fsyncs the directory. Missing parent directories are
// created (0755) and made durable too.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := mkdirAllSync(dir); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temp file for %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	// Chmod after writing: CreateTemp uses 0600 and the umask would
	// otherwise mask perm.
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	return syncDir(dir)
}

// mkdirAllSync creates dir and its missing parents, fsyncing the parent of
// each directory it creates so that the new entries survive a power loss.
func mkdirAllSync(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stat %s: %w", d, err)
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := syncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// syncDir fsyncs a directory so that renames and creations in it are
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
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

// readFile stats and hashes path. A missing file is not an error. When
// keep is true the content is returned too.
func readFile(path string, keep bool) (fileInfo, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileInfo{}, nil
	}
	if err != nil {
		return fileInfo{}, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileInfo{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fileInfo{}, fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	h := sha256.New()
	var buf bytes.Buffer
	w := io.Writer(h)
	if keep {
		w = io.MultiWriter(h, &buf)
	}
	if _, err := io.Copy(w, f); err != nil {
		return fileInfo{}, fmt.Errorf("read %s: %w", path, err)
	}
	fi := fileInfo{present: true, mode: st.Mode().Perm(), data: buf.Bytes()}
	h.Sum(fi.sum[:0])
	return fi, nil
}
