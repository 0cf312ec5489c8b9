package fsm

import (
	"bytes"
	mrand "math/rand/v2"
	"strings"
	"testing"
)

// securityTypes are the command types FuzzSecurityCommand feeds.
var securityTypes = []MessageType{
	CreateTokenType, RevokeTokenType, UseEnrollTokenType, SetDeviceLabelsType,
	RevokeDeviceType, UnrevokeDeviceType, AuditMemberChangeType,
}

// FuzzSecurityCommand applies arbitrary bodies of the security commands to
// two replicas holding the same state: a body that does not decode stops
// the server (the panic Apply raises for a corrupt entry), anything else
// applies or is rejected the same way on both, without any other panic.
func FuzzSecurityCommand(f *testing.F) {
	rng := mrand.New(mrand.NewPCG(7, 7))
	for i := range 64 {
		cmd := securityCommand(f, rng, i)
		f.Add(cmd[0], cmd[1:])
	}
	f.Add(byte(CreateTokenType), []byte(`{"accessor":"0000000000000001","secret_hash":"`+strings.Repeat("0", 64)+`","policy":"admin","scope":{"a":"b"}}`))
	f.Add(byte(UseEnrollTokenType), []byte(`{"secret_hash":null,"device":""}`))
	f.Add(byte(SetDeviceLabelsType), []byte(`{"id":"dev-1","labels":{"":""},"remove":["x"],"replace":true}`))
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		mt := securityTypes[int(typ)%len(securityTypes)]
		cmd := append([]byte{byte(mt)}, body...)
		var states [2][]byte
		var results [2]ApplyResult
		for i := range states {
			r := mrand.New(mrand.NewPCG(1, 2))
			a := newApplier(t, Config{AuditLimit: 8})
			for j := range 40 {
				a.idx++
				a.f.Apply(a.idx, securityCommand(t, r, j))
			}
			if !applyOrDecodePanic(t, a.f, a.idx+1, cmd, &results[i]) {
				return
			}
			states[i] = snapshotBytes(t, a.f)
		}
		if !bytes.Equal(states[0], states[1]) || (results[0].Err == nil) != (results[1].Err == nil) {
			t.Fatalf("replicas differ after %s %q", mt, body)
		}
	})
}

// applyOrDecodePanic applies cmd, reporting false if Apply panicked because
// the body does not decode; any other panic fails the test.
func applyOrDecodePanic(t *testing.T, f *FSM, index uint64, cmd []byte, res *ApplyResult) (applied bool) {
	defer func() {
		if p := recover(); p != nil {
			msg, _ := p.(string)
			if !strings.Contains(msg, "decode") {
				t.Fatalf("Apply panicked: %v", p)
			}
			applied = false
		}
	}()
	*res = f.Apply(index, cmd)
	return true
}
