package wire

import (
	"bytes"
	"crypto/tls"
	"errors"
	"reflect"
	"testing"

	"github.com/quic-go/quic-go"
)

func enrollFrame(t testing.TB, write func(*bytes.Buffer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestEnrollRoundTrip(t *testing.T) {
	reqs := []*EnrollRequest{
		{Kind: EnrollWithToken, Token: "mtk_secret", CSR: []byte{1, 2, 3}},
		{Kind: EnrollRenew, CSR: bytes.Repeat([]byte{7}, MaxCSRLen)},
	}
	for _, req := range reqs {
		b := enrollFrame(t, func(w *bytes.Buffer) error { return WriteEnrollRequest(w, req) })
		got, err := ReadEnrollRequest(bytes.NewReader(b))
		if err != nil || !reflect.DeepEqual(got, req) {
			t.Errorf("request round trip: %+v, %v; want %+v", got, err, req)
		}
		for i := range len(b) {
			if _, err := ReadEnrollRequest(bytes.NewReader(b[:i])); err == nil || closeCode(err) != CloseProtocolError {
				t.Fatalf("prefix %d of %d: %v, want a protocol error", i, len(b), err)
			}
		}
		if _, err := ReadEnrollRequest(bytes.NewReader(append(b, 0))); !errors.Is(err, ErrMalformed) {
			t.Errorf("trailing byte: %v", err)
		}
	}
	answers := []*EnrollAnswer{
		{Status: EnrollOK, Certificates: [][]byte{{1}, {2, 3}}},
		{Status: EnrollRefused, Reason: "token expired"},
	}
	for _, a := range answers {
		b := enrollFrame(t, func(w *bytes.Buffer) error { return WriteEnrollAnswer(w, a) })
		got, err := ReadEnrollAnswer(bytes.NewReader(b))
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Errorf("answer round trip: %+v, %v; want %+v", got, err, a)
		}
		for i := range len(b) {
			if _, err := ReadEnrollAnswer(bytes.NewReader(b[:i])); err == nil {
				t.Fatalf("prefix %d of %d accepted", i, len(b))
			}
		}
	}
	var ee *EnrollError
	if err := answers[1].Err(); !errors.As(err, &ee) || ee.Status != EnrollRefused {
		t.Errorf("Err() = %v", err)
	}
}

// closeCode is the close code a server closes with for err.
func closeCode(err error) quic.ApplicationErrorCode { c, _ := CloseCodeFor(err); return c }

func TestEnrollMalformed(t *testing.T) {
	for name, req := range map[string]*EnrollRequest{
		"unknown kind":        {Kind: 9, CSR: []byte{1}},
		"token without token": {Kind: EnrollWithToken, CSR: []byte{1}},
		"renewal with token":  {Kind: EnrollRenew, Token: "x", CSR: []byte{1}},
		"no CSR":              {Kind: EnrollRenew},
		"CSR too long":        {Kind: EnrollRenew, CSR: make([]byte, MaxCSRLen+1)},
	} {
		b := enrollFrame(t, func(w *bytes.Buffer) error { return WriteEnrollRequest(w, req) })
		if _, err := ReadEnrollRequest(bytes.NewReader(b)); closeCode(err) != CloseProtocolError {
			t.Errorf("%s: %v, want a protocol error", name, err)
		}
	}
	for name, a := range map[string]*EnrollAnswer{
		"ok without certificates": {Status: EnrollOK, Certificates: [][]byte{{1}}},
		"refusal with a cert":     {Status: EnrollRefused, Certificates: [][]byte{{1}}},
		"unknown status":          {Status: 9},
	} {
		b := enrollFrame(t, func(w *bytes.Buffer) error { return WriteEnrollAnswer(w, a) })
		if _, err := ReadEnrollAnswer(bytes.NewReader(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// An announced size beyond the limit is refused before reading it.
	huge := appendUvarint(nil, MaxEnrollFrame+1)
	if _, err := ReadEnrollRequest(bytes.NewReader(huge)); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversized frame: %v", err)
	}
	if _, err := ReadEnrollRequest(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("long length: %v", err)
	}
	if err := WriteEnrollRequest(new(bytes.Buffer), &EnrollRequest{Kind: EnrollRenew, Token: string(make([]byte, MaxEnrollFrame))}); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("writing an oversized request: %v", err)
	}
}

func TestEnrollTLSConfig(t *testing.T) {
	base := ServerTLSConfig(nil, tls.Certificate{}, nil)
	e := EnrollServerTLSConfig(base)
	if e.ClientAuth != tls.VerifyClientCertIfGiven || !e.SessionTicketsDisabled || !reflect.DeepEqual(e.NextProtos, []string{EnrollALPN}) {
		t.Errorf("enroll config: auth %v, tickets disabled %v, ALPN %v", e.ClientAuth, e.SessionTicketsDisabled, e.NextProtos)
	}
	if base.ClientAuth != tls.RequireAndVerifyClientCert || !reflect.DeepEqual(base.NextProtos, []string{ALPN}) {
		t.Error("deriving the enroll config changed the session config")
	}
	if OffersEnroll(&tls.ClientHelloInfo{SupportedProtos: []string{ALPN}}) || !OffersEnroll(&tls.ClientHelloInfo{SupportedProtos: []string{EnrollALPN}}) {
		t.Error("OffersEnroll")
	}
}

func FuzzEnroll(f *testing.F) {
	for _, req := range []*EnrollRequest{{Kind: EnrollWithToken, Token: "t", CSR: []byte{1}}, {Kind: EnrollRenew, CSR: []byte{2}}} {
		f.Add(enrollFrame(f, func(w *bytes.Buffer) error { return WriteEnrollRequest(w, req) }))
	}
	f.Add(enrollFrame(f, func(w *bytes.Buffer) error {
		return WriteEnrollAnswer(w, &EnrollAnswer{Status: EnrollOK, Certificates: [][]byte{{1}, {2}}})
	}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if req, err := ReadEnrollRequest(bytes.NewReader(b)); err == nil {
			again := enrollFrame(t, func(w *bytes.Buffer) error { return WriteEnrollRequest(w, req) })
			if !bytes.Equal(again, b) {
				t.Fatalf("request re-encodes differently: %x vs %x", again, b)
			}
		}
		if a, err := ReadEnrollAnswer(bytes.NewReader(b)); err == nil {
			again := enrollFrame(t, func(w *bytes.Buffer) error { return WriteEnrollAnswer(w, a) })
			if !bytes.Equal(again, b) {
				t.Fatalf("answer re-encodes differently: %x vs %x", again, b)
			}
		}
	})
}
