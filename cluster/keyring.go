package cluster

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"github.com/meteor-edge/meteor/cluster/api"
)

// keyringFileName is the gossip keyring's file in the data dir.
const keyringFileName = "gossip-keyring.json"

// The keyring operations, as the API and the internal endpoint name them.
const (
	keyringList    = "list"
	keyringInstall = "install"
	keyringUse     = "use"
	keyringRemove  = "remove"
)

var (
	// errKeyNotInstalled refuses making a key primary that this server
	// does not have.
	errKeyNotInstalled = errors.New("the key is not installed here: install it first (meteor keyring install)")
	// errRemovePrimary refuses removing the key this server encrypts with.
	errRemovePrimary = errors.New("the key is the primary key here: make another key primary first (meteor keyring use)")
)

// keyring is a server's gossip keyring: memberlist's, which encrypts
// gossip with the primary key and decrypts with any installed key, and
// its file in the data dir, which a restart reads back so that installed
// keys and the primary survive it. The file is seeded from
// Config.GossipKey on the first start; afterwards it wins over the
// configured key, which after a rotation is an old one.
//
// mu serializes changes: each is written to the file before memberlist
// takes it, so a crash never leaves a primary on disk that memberlist
// did not have.
type keyring struct {
	path string
	mu   sync.Mutex
	ring *memberlist.Keyring // changed only with mu held
}

// keyringFile is the file's content.
type keyringFile struct {
	// Keys are base64, the primary first.
	Keys []string `json:"keys"`
}

// openKeyring reads the keyring in dataDir, or seeds it with seed; it
// returns nil when there is neither (gossip is not encrypted).
func openKeyring(dataDir string, seed []byte, logger hclog.Logger) (*keyring, error) {
	path := filepath.Join(dataDir, keyringFileName)
	b, err := os.ReadFile(path)
	var keys [][]byte
	switch {
	case errors.Is(err, os.ErrNotExist):
		if len(seed) == 0 {
			return nil, nil
		}
		keys = [][]byte{seed}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		if err := writeKeyringFile(path, keys); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("read gossip keyring: %w", err)
	default:
		if keys, err = parseKeyringFile(b); err != nil {
			return nil, fmt.Errorf("gossip keyring %s: %w (restore it, or delete it to start again from the configured gossip key)", path, err)
		}
		if len(seed) > 0 && !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, seed) }) {
			logger.Warn("the configured gossip key is not in the keyring, which was rotated since: the keyring wins", "keyring", path, "primary", api.KeyFingerprint(keys[0]))
		}
	}
	ring, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("gossip keyring %s: %w", path, err)
	}
	return &keyring{path: path, ring: ring}, nil
}

func parseKeyringFile(b []byte) ([][]byte, error) {
	var f keyringFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("not a keyring: %w", err)
	}
	if len(f.Keys) == 0 {
		return nil, errors.New("no keys")
	}
	keys := make([][]byte, len(f.Keys))
	for i, s := range f.Keys {
		k, err := ParseGossipKey(s)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		keys[i] = k
	}
	return keys, nil
}

// writeKeyringFile replaces the keyring file atomically: a crash leaves
// the old file or the new one.
func writeKeyringFile(path string, keys [][]byte) error {
	f := keyringFile{Keys: make([]string, len(keys))}
	for i, k := range keys {
		f.Keys[i] = base64.StdEncoding.EncodeToString(k)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := writeFileSync(tmp, append(b, '\n')); err != nil {
		return fmt.Errorf("write gossip keyring: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write gossip keyring: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("write gossip keyring: sync dir: %w", err)
		}
	}
	return nil
}

// keys returns a copy of the installed keys, the primary first.
func (k *keyring) keys() [][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keysLocked()
}

func (k *keyring) keysLocked() [][]byte {
	var out [][]byte
	for _, key := range k.ring.GetKeys() {
		out = append(out, bytes.Clone(key))
	}
	return out
}

// view is the keyring as the API shows it, by fingerprint.
func (k *keyring) view(id string) api.KeyringServer {
	keys := k.keys()
	v := api.KeyringServer{ID: id, Primary: api.KeyFingerprint(keys[0])}
	for _, key := range keys {
		v.Keys = append(v.Keys, api.KeyFingerprint(key))
	}
	return v
}

// secrets returns the installed keys, base64, the primary first.
func (k *keyring) secrets() []string {
	var out []string
	for _, key := range k.keys() {
		out = append(out, base64.StdEncoding.EncodeToString(key))
	}
	return out
}

// change installs, uses (makes primary) or removes a key: in the file
// first, then in memberlist. Installing a key installed, or removing one
// not installed, changes nothing.
func (k *keyring) change(op string, key []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	have := k.keysLocked()
	next, err := nextKeys(have, op, key)
	if err != nil {
		return err
	}
	if slices.EqualFunc(have, next, bytes.Equal) {
		return nil
	}
	if err := writeKeyringFile(k.path, next); err != nil {
		return err
	}
	switch op {
	case keyringInstall:
		return k.ring.AddKey(key)
	case keyringUse:
		return k.ring.UseKey(key)
	}
	return k.removeLocked(have, key)
}

// removeLocked removes key from memberlist's keyring. memberlist's
// RemoveKey shifts the keys after the removed one down inside the slice
// GetKeys has handed to its encrypting and decrypting goroutines, which
// read it without a lock; removing the last key shifts nothing. So the
// keys after it are taken off from the end and put back afterwards: none
// of them is the primary (that one is first), and only a packet that a
// server encrypts with one of them in those microseconds is lost, which
// gossip sends again.
func (k *keyring) removeLocked(have [][]byte, key []byte) error {
	i := slices.IndexFunc(have, func(h []byte) bool { return bytes.Equal(h, key) })
	tail := have[i+1:]
	for j := len(tail) - 1; j >= 0; j-- {
		if err := k.ring.RemoveKey(tail[j]); err != nil {
			return err
		}
	}
	if err := k.ring.RemoveKey(key); err != nil {
		return err
	}
	for _, t := range tail {
		if err := k.ring.AddKey(t); err != nil {
			return err
		}
	}
	return nil
}

// nextKeys returns the keys after op on key, the primary first.
func nextKeys(keys [][]byte, op string, key []byte) ([][]byte, error) {
	if err := memberlist.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	i := slices.IndexFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) })
	switch op {
	case keyringInstall:
		if i >= 0 {
			return keys, nil
		}
		return append(slices.Clip(keys), key), nil
	case keyringUse:
		if i < 0 {
			return nil, errKeyNotInstalled
		}
		return append([][]byte{key}, slices.Delete(slices.Clone(keys), i, i+1)...), nil
	case keyringRemove:
		if i == 0 {
			return nil, errRemovePrimary
		}
		if i < 0 {
			return keys, nil
		}
		return slices.Delete(slices.Clone(keys), i, i+1), nil
	}
	return nil, fmt.Errorf("keyring operation %q: must be install, use or remove", op)
}
