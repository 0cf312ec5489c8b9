package cluster

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meteor-edge/meteor/fsm"
	"github.com/meteor-edge/meteor/fsm/acl"
)

// FuzzAuthenticate feeds arbitrary Authorization headers, and arbitrary
// forwarded-request headers (signature, signing time, actor), to the
// authenticator of a server whose state holds one admin token. It must
// never panic. It may accept a bearer header only if it carries that
// token's secret, and a forwarded request only with the signature the
// cluster secret gives for it.
func FuzzAuthenticate(f *testing.F) {
	tok, err := acl.Generate(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	if err != nil {
		f.Fatal(err)
	}
	state, err := fsm.New(fsm.DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	cmd, err := fsm.Encode(fsm.CreateTokenType, &fsm.CreateTokenRequest{Accessor: tok.Accessor, SecretHash: acl.HashSecret(tok.Secret), Policy: acl.PolicyAdmin, Time: 1})
	if err != nil {
		f.Fatal(err)
	}
	if res := state.Apply(1, cmd); res.Err != nil {
		f.Fatal(res.Err)
	}
	peers := newPeerClient(&Config{NodeID: "s1", ClusterSecret: []byte("cluster secret")})
	a := newAuthenticator(&ACLConfig{}, state, SystemClock{}, peers, false)
	now := strconv.FormatInt(time.Now().UnixNano(), 10)

	f.Add("Bearer "+tok.Secret, "", "", "")
	f.Add("Bearer  "+tok.Secret+" \t", "", "", "")
	f.Add("bearer "+tok.Secret, "", "", "")
	f.Add("Bearer "+tok.Secret[:len(tok.Secret)-1], "", "", "")
	f.Add("Bearer "+acl.SecretPrefix, "", "", "")
	f.Add("Basic dXNlcjpwYXNz", "", "", "")
	f.Add("", strings.Repeat("0", 64), now, "")
	f.Add("", "zz", now, tok.Accessor)
	f.Add("Bearer "+tok.Secret, "00", "-1", "ffffffffffffffff")
	f.Fuzz(func(t *testing.T, authz, sig, signedAt, actor string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/intents", nil)
		for k, v := range map[string]string{"Authorization": authz, headerSignature: sig, headerSignedAt: signedAt, headerActor: actor, headerForwarded: "s2"} {
			if v != "" {
				r.Header[k] = []string{v}
			}
		}
		p, err := a.verify(r)
		if err != nil {
			if p != nil {
				t.Fatalf("refused (%v) with a principal", err)
			}
			return
		}
		if sig != "" {
			digest, err := bodyDigest(r)
			if err != nil || sig != peers.sign([]byte(forwardedString(r, digest))) {
				t.Fatalf("a forwarded request with signature %q accepted", sig)
			}
			return
		}
		secret, _ := strings.CutPrefix(authz, "Bearer ")
		if strings.TrimSpace(secret) != tok.Secret || p.token == nil || p.token.Accessor != tok.Accessor {
			t.Fatalf("Authorization %q accepted as %+v", authz, p)
		}
	})
}
