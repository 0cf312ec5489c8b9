package cluster

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm"
)

// keyringHost is what the keyring endpoints ask of the server (Server).
type keyringHost interface {
	// gossipKeyring is nil when gossip is not encrypted.
	gossipKeyring() *keyring
	members() []member
	// raftServerIDs lists the servers of the Raft configuration.
	raftServerIDs() []string
}

func (s *Server) gossipKeyring() *keyring { return s.gossip.keyring }

func (s *Server) raftServerIDs() []string {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var ids []string
	for _, srv := range f.Configuration().Servers {
		ids = append(ids, string(srv.ID))
	}
	return ids
}

// keyringCall is the body of /v1/internal/keyring, which one server sends
// every other to list or change its keyring (peerClient.keyring).
type keyringCall struct {
	Op string `json:"op"`
	// Server is the node ID the call is for, so that it cannot be
	// replayed to another server.
	Server string `json:"server"`
	// Key is sealed with a key derived from the cluster secret (sealKey),
	// since the request may travel in the clear.
	Key string `json:"key,omitempty"`
}

// keyringAAD binds a sealed key to its operation and server.
func keyringAAD(op, server string) []byte { return []byte("keyring\n" + op + "\n" + server) }

// keyringTimeout bounds each server's answer to a keyring call.
const keyringTimeout = 5 * time.Second

// keyring lists or changes the keyring of server m (/v1/internal/keyring).
func (p *peerClient) keyring(ctx context.Context, m member, op string, key []byte) (api.KeyringServer, error) {
	call := keyringCall{Op: op, Server: m.ID}
	if key != nil {
		sealed, err := p.sealKey(keyringAAD(op, m.ID), key)
		if err != nil {
			return api.KeyringServer{}, err
		}
		call.Key = sealed
	}
	body, err := json.Marshal(call)
	if err != nil {
		return api.KeyringServer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, keyringTimeout)
	defer cancel()
	u := p.base(m.HTTPAddr)
	u.Path = "/v1/internal/keyring"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return api.KeyringServer{}, err
	}
	req.Header.Set(headerForwarded, p.self)
	if err := p.signForwarded(req, fsm.Actor{}, p.now()); err != nil {
		return api.KeyringServer{}, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return api.KeyringServer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return api.KeyringServer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		if json.Unmarshal(data, &e) != nil || e.Message == "" {
			return api.KeyringServer{}, fmt.Errorf("answered %s: %s", resp.Status, bytes.TrimSpace(data))
		}
		return api.KeyringServer{}, errors.New(e.Message)
	}
	var out api.KeyringServer
	if err := json.Unmarshal(data, &out); err != nil {
		return api.KeyringServer{}, fmt.Errorf("decode keyring: %w", err)
	}
	return out, nil
}

// keyringAEAD is the cipher that seals gossip keys between servers, keyed
// from the cluster secret.
func (p *peerClient) keyringAEAD() (cipher.AEAD, error) {
	m := hmac.New(sha256.New, p.secret)
	m.Write([]byte("meteor gossip keyring v1"))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func (p *peerClient) sealKey(aad, key []byte) (string, error) {
	aead, err := p.keyringAEAD()
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	return base64.StdEncoding.EncodeToString(aead.Seal(nonce, nonce, key, aad)), nil
}

func (p *peerClient) openKey(aad []byte, sealed string) ([]byte, error) {
	aead, err := p.keyringAEAD()
	if err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(b) < aead.NonceSize() {
		return nil, errors.New("sealed gossip key: not base64 or too short")
	}
	key, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], aad)
	if err != nil {
		return nil, errors.New("sealed gossip key: does not open with this server's cluster secret")
	}
	return key, nil
}

// localKeyring lists or changes this server's keyring.
func localKeyring(kr *keyring, id, op string, key []byte) (api.KeyringServer, error) {
	if op != keyringList {
		if err := kr.change(op, key); err != nil {
			return api.KeyringServer{}, err
		}
	}
	return kr.view(id), nil
}

// signedByServer admits a request another server signed as its own
// (signForwarded), whether the ACL is on or not: the keyring decides who
// may join gossip. It needs the cluster secret, the same on every server.
func (h *httpAPI) signedByServer(r *http.Request) *api.Error {
	if len(h.cfg.ClusterSecret) < 16 {
		return &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden,
			Message: "the gossip keyring is read and changed only between servers that share a cluster secret of at least 16 bytes (--cluster-secret-file or --tls-dir)"}
	}
	a := h.auth
	if a == nil {
		a = newAuthenticator(&ACLConfig{}, h.state, h.clock, h.peers, h.cfg.PeerTLS != nil)
	}
	if p, err := a.verifySigned(r); err != nil || p.token != nil || p.server == "" {
		return &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden, Message: "internal endpoint: servers only (a request signed with the cluster secret)"}
	}
	return nil
}

// handleInternalKeyring lists or changes this server's keyring for
// another server, which fans an operator's request out (keyringAll).
func (h *httpAPI) handleInternalKeyring(w http.ResponseWriter, r *http.Request) {
	if e := h.signedByServer(r); e != nil {
		writeError(w, e)
		return
	}
	var call keyringCall
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&call); err != nil {
		writeError(w, badRequest("keyring call: %v", err))
		return
	}
	if call.Server != h.cfg.NodeID {
		writeError(w, badRequest("keyring call for server %q reached %s", call.Server, h.cfg.NodeID))
		return
	}
	_, kr, e := h.keyringOf()
	if e != nil {
		writeError(w, e)
		return
	}
	var key []byte
	if call.Op != keyringList {
		var err error
		if key, err = h.peers.openKey(keyringAAD(call.Op, call.Server), call.Key); err != nil {
			writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden, Message: err.Error()})
			return
		}
	}
	res, err := localKeyring(kr, h.cfg.NodeID, call.Op, key)
	if err != nil {
		writeError(w, keyringError(err))
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func keyringError(err error) *api.Error {
	if errors.Is(err, errKeyNotInstalled) || errors.Is(err, errRemovePrimary) {
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: err.Error()}
	}
	return toAPIError(err)
}

// keyringOf returns the server and its keyring, or the error to answer
// when gossip is not encrypted.
func (h *httpAPI) keyringOf() (keyringHost, *keyring, *api.Error) {
	host, ok := h.admin.(keyringHost)
	if ok && host.gossipKeyring() != nil {
		return host, host.gossipKeyring(), nil
	}
	return nil, nil, badRequest("gossip is not encrypted on %s, so it has no keyring: start the servers with a gossip key (meteor server --tls-dir, or --encrypt)", h.cfg.NodeID)
}

// keyringAll lists or changes the keyring of every server that should
// have it: this one, every other gossip reports alive, and every other
// server of the Raft configuration, which cannot be reached and gets an
// error.
// The result is sorted by node ID.
func (h *httpAPI) keyringAll(ctx context.Context, host keyringHost, op string, key []byte) []api.KeyringServer {
	kr := host.gossipKeyring()
	var (
		mu  sync.Mutex
		out []api.KeyringServer
		wg  sync.WaitGroup
	)
	add := func(id string, res api.KeyringServer, err error) {
		if err != nil {
			res = api.KeyringServer{Error: err.Error()}
		}
		res.ID = id
		mu.Lock()
		out = append(out, res)
		mu.Unlock()
	}
	wg.Go(func() {
		res, err := localKeyring(kr, h.cfg.NodeID, op, key)
		add(h.cfg.NodeID, res, err)
	})
	asked := map[string]bool{h.cfg.NodeID: true}
	for _, m := range host.members() {
		if m.ID != h.cfg.NodeID && m.State == memberlist.StateAlive && !m.Leaving {
			asked[m.ID] = true
			wg.Go(func() {
				res, err := h.peers.keyring(ctx, m, op, key)
				add(m.ID, res, err)
			})
		}
	}
	// A server of the Raft configuration that gossip does not show alive
	// (failed, left, or forgotten) would come back without the change:
	// it is reported, so that use and remove refuse.
	for _, id := range host.raftServerIDs() {
		if !asked[id] {
			add(id, api.KeyringServer{}, fmt.Errorf("not reached: a server of the Raft configuration that gossip does not show alive (start it again, or remove it with 'meteor members remove %s')", id))
		}
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b api.KeyringServer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// handleKeyringList answers every server's keyring, by fingerprint; with
// ?secrets=true this server's keys themselves too.
func (h *httpAPI) handleKeyringList(w http.ResponseWriter, r *http.Request) {
	host, kr, e := h.keyringOf()
	if e != nil {
		writeError(w, e)
		return
	}
	res := api.KeyringResponse{Servers: h.keyringAll(r.Context(), host, keyringList, nil)}
	if secrets, _ := strconv.ParseBool(r.URL.Query().Get("secrets")); secrets {
		for i := range res.Servers {
			if res.Servers[i].ID == h.cfg.NodeID {
				res.Servers[i].Secrets = kr.secrets()
			}
		}
	}
	writeJSON(w, http.StatusOK, res)
}

// handleKeyringChange installs, uses or removes a key on every server.
// Use and remove first read every server's keyring and change nothing
// unless all answer, and use only a key every server has, remove only
// one no server encrypts with: a server whose primary key another cannot
// decrypt would look failed to it. A change some servers made and others
// did not is answered 502, naming both.
func (h *httpAPI) handleKeyringChange(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		host, _, e := h.keyringOf()
		if e != nil {
			writeError(w, e)
			return
		}
		var req api.KeyringRequest
		body, e := readBody(w, r, 64<<10, "keyring request")
		if e != nil {
			writeError(w, e)
			return
		}
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, badRequest("keyring request: %v (send {\"key\": \"BASE64\"})", err))
			return
		}
		key, err := ParseGossipKey(req.Key)
		if err != nil {
			writeError(w, badRequest("%v", err))
			return
		}
		fp := api.KeyFingerprint(key)
		if op != keyringInstall {
			if e := h.keyringCheck(r.Context(), host, op, fp); e != nil {
				writeError(w, e)
				return
			}
		}
		res := api.KeyringResponse{Servers: h.keyringAll(r.Context(), host, op, key)}
		var done, failed []string
		for _, s := range res.Servers {
			if s.Error != "" {
				failed = append(failed, s.ID+" ("+s.Error+")")
			} else {
				done = append(done, s.ID)
			}
		}
		var outcome error
		if len(failed) > 0 {
			res.Code = api.CodePartial
			res.Message = fmt.Sprintf("%s %s: done on %s; FAILED on %s: run it again once they are back", op, fp, orNone(done), strings.Join(failed, ", "))
			outcome = errors.New(res.Message)
		}
		h.auditMember(r, "keyring-"+op, "keyring:"+fp, outcome)
		code := http.StatusOK
		if outcome != nil {
			code = http.StatusBadGateway
		}
		writeJSON(w, code, res)
	}
}

// keyringCheck reads every server's keyring before a use or remove and
// says why the change must not be made, if it must not.
func (h *httpAPI) keyringCheck(ctx context.Context, host keyringHost, op, fp string) *api.Error {
	var unread, lacking, primary, having []string
	for _, s := range h.keyringAll(ctx, host, keyringList, nil) {
		switch {
		case s.Error != "":
			unread = append(unread, s.ID+" ("+s.Error+")")
		case !slices.Contains(s.Keys, fp):
			lacking = append(lacking, s.ID)
		default:
			having = append(having, s.ID)
			if s.Primary == fp {
				primary = append(primary, s.ID)
			}
		}
	}
	conflict := func(format string, args ...any) *api.Error {
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(format, args...) + "; nothing was changed"}
	}
	switch {
	case len(unread) > 0:
		return &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeUnreachable, RetryAfterMS: 1000,
			Message: fmt.Sprintf("cannot read the keyring of %s, so cannot check that %s %s is safe; nothing was changed", strings.Join(unread, ", "), op, fp)}
	case op == keyringUse && len(lacking) > 0:
		return conflict("key %s is not installed on %s: install it everywhere first (meteor keyring install)", fp, strings.Join(lacking, ", "))
	case op == keyringRemove && len(having) == 0:
		return &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf("key %s is installed on no server; nothing was changed", fp)}
	case op == keyringRemove && len(primary) > 0:
		return conflict("key %s is the primary key of %s: make another key primary first (meteor keyring use)", fp, strings.Join(primary, ", "))
	}
	return nil
}

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}
