package wire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"slices"
)

// EnrollALPN is the TLS application protocol of device enrollment and
// certificate renewal, served on the agents' QUIC port beside ALPN. A
// connection with it carries one stream with one EnrollRequest and one
// EnrollAnswer, and nothing else (docs/wire.md, "Enrollment"). The client
// may present no certificate (enrollment with a token) or its current
// device certificate (renewal).
const EnrollALPN = "meteor-enroll/1"

// Limits of the enrollment exchange, checked before allocating.
const (
	// MaxEnrollFrame bounds one encoded request or answer.
	MaxEnrollFrame = 32 << 10
	// MaxCSRLen bounds the certificate request in an EnrollRequest.
	MaxCSRLen = 4 << 10
	// MaxEnrollCerts bounds the certificates in an EnrollAnswer, and
	// MaxCertLen each one.
	MaxEnrollCerts = 4
	MaxCertLen     = 8 << 10
)

// EnrollKind says what an EnrollRequest asks for.
type EnrollKind uint8

const (
	// EnrollWithToken enrolls a new device with an enrollment token;
	// the client presents no certificate.
	EnrollWithToken EnrollKind = 1
	// EnrollRenew renews the certificate the client presents, for a new
	// key; the request carries no token.
	EnrollRenew EnrollKind = 2
)

// EnrollRequest asks a server to sign a device's certificate request.
type EnrollRequest struct {
	Kind EnrollKind
	// Token is the enrollment token's secret (EnrollWithToken only).
	Token string
	// CSR is the device's PKCS #10 certificate request in DER.
	CSR []byte
}

// EnrollStatus is the outcome in an EnrollAnswer.
type EnrollStatus uint8

const (
	// EnrollOK: Certificates holds the signed device certificate first,
	// then the CA certificate.
	EnrollOK EnrollStatus = 0
	// EnrollRefused: the token or the device is not allowed (unknown,
	// expired, used up or revoked token, revoked or known device); the
	// same request will not succeed later.
	EnrollRefused EnrollStatus = 1
	// EnrollBadRequest: the certificate request is unusable.
	EnrollBadRequest EnrollStatus = 2
	// EnrollUnavailable: this server cannot sign now (it holds no CA key,
	// or could not commit the enrollment); another server, or a later
	// try, may.
	EnrollUnavailable EnrollStatus = 3

	maxEnrollStatus = EnrollUnavailable
)

var enrollStatusNames = [...]string{"ok", "refused", "bad request", "unavailable"}

func (s EnrollStatus) String() string {
	if s <= maxEnrollStatus {
		return enrollStatusNames[s]
	}
	return fmt.Sprintf("EnrollStatus(%d)", uint8(s))
}

// EnrollAnswer is a server's answer to an EnrollRequest.
type EnrollAnswer struct {
	Status EnrollStatus
	// Reason is for humans and logs (empty with EnrollOK).
	Reason string
	// Certificates (EnrollOK only) are DER certificates: the device's,
	// then the CA's.
	Certificates [][]byte
}

// EnrollError is a refusal carried by an EnrollAnswer.
type EnrollError struct {
	Status EnrollStatus
	Reason string
}

func (e *EnrollError) Error() string { return fmt.Sprintf("enrollment %s: %s", e.Status, e.Reason) }

// Err returns nil for EnrollOK and an *EnrollError otherwise.
func (a *EnrollAnswer) Err() error {
	if a.Status == EnrollOK {
		return nil
	}
	return &EnrollError{Status: a.Status, Reason: a.Reason}
}

func (r *EnrollRequest) append(b []byte) []byte {
	b = append(b, byte(r.Kind))
	b = appendString(b, r.Token)
	return appendBytes(b, r.CSR)
}

func (r *EnrollRequest) decode(p []byte) error {
	d := decoder{b: p}
	r.Kind = EnrollKind(d.u8())
	r.Token = d.str(MaxTokenLen, "enroll token")
	r.CSR = d.bytes(MaxCSRLen, "certificate request")
	if err := d.finish("enroll request"); err != nil {
		return err
	}
	switch {
	case r.Kind != EnrollWithToken && r.Kind != EnrollRenew:
		return fmt.Errorf("wire: decode enroll request: %w: kind %d", ErrMalformed, r.Kind)
	case r.Kind == EnrollWithToken && r.Token == "":
		return fmt.Errorf("wire: decode enroll request: %w: enrollment without a token", ErrMalformed)
	case r.Kind == EnrollRenew && r.Token != "":
		return fmt.Errorf("wire: decode enroll request: %w: a renewal carries no token", ErrMalformed)
	case len(r.CSR) == 0:
		return fmt.Errorf("wire: decode enroll request: %w: no certificate request", ErrMalformed)
	}
	return nil
}

func (a *EnrollAnswer) append(b []byte) []byte {
	b = append(b, byte(a.Status))
	b = appendString(b, a.Reason)
	b = appendUvarint(b, uint64(len(a.Certificates)))
	for _, c := range a.Certificates {
		b = appendBytes(b, c)
	}
	return b
}

func (a *EnrollAnswer) decode(p []byte) error {
	d := decoder{b: p}
	a.Status = EnrollStatus(d.u8())
	a.Reason = d.str(MaxTextLen, "enroll reason")
	n := d.length(MaxEnrollCerts, 1, "certificates")
	a.Certificates = nil
	for range n {
		a.Certificates = append(a.Certificates, d.bytes(MaxCertLen, "certificate"))
	}
	if err := d.finish("enroll answer"); err != nil {
		return err
	}
	switch {
	case a.Status > maxEnrollStatus:
		return fmt.Errorf("wire: decode enroll answer: %w: status %d", ErrMalformed, a.Status)
	case a.Status == EnrollOK && len(a.Certificates) < 2:
		return fmt.Errorf("wire: decode enroll answer: %w: %d certificates, want the device's and the CA's", ErrMalformed, len(a.Certificates))
	case a.Status != EnrollOK && len(a.Certificates) != 0:
		return fmt.Errorf("wire: decode enroll answer: %w: certificates with a refusal", ErrMalformed)
	}
	return nil
}

// WriteEnrollRequest writes r as one length-prefixed frame.
func WriteEnrollRequest(w io.Writer, r *EnrollRequest) error { return writeEnroll(w, r.append(nil)) }

// WriteEnrollAnswer writes a as one length-prefixed frame.
func WriteEnrollAnswer(w io.Writer, a *EnrollAnswer) error { return writeEnroll(w, a.append(nil)) }

// ReadEnrollRequest reads and checks one request frame. Malformed or
// oversized input yields an error matching ErrMalformed or
// ErrFrameTooLarge (CloseCodeFor maps both to CloseProtocolError).
func ReadEnrollRequest(r io.Reader) (*EnrollRequest, error) { return readEnrollFrame[EnrollRequest](r) }

// ReadEnrollAnswer reads and checks one answer frame.
func ReadEnrollAnswer(r io.Reader) (*EnrollAnswer, error) { return readEnrollFrame[EnrollAnswer](r) }

func readEnrollFrame[T any, P interface {
	*T
	decode([]byte) error
}](r io.Reader) (*T, error) {
	p, err := readEnroll(r)
	if err != nil {
		return nil, err
	}
	v := new(T)
	if err := P(v).decode(p); err != nil {
		return nil, err
	}
	return v, nil
}

func writeEnroll(w io.Writer, payload []byte) error {
	if len(payload) > MaxEnrollFrame {
		return fmt.Errorf("%w: enroll frame of %d bytes, limit %d", ErrFrameTooLarge, len(payload), MaxEnrollFrame)
	}
	_, err := w.Write(append(appendUvarint(nil, uint64(len(payload))), payload...))
	return err
}

// readEnroll reads one frame: uvarint(len) | payload, and expects the
// stream to end there.
func readEnroll(r io.Reader) ([]byte, error) {
	var hdr []byte
	var one [1]byte
	for {
		if _, err := io.ReadFull(r, one[:]); err != nil {
			return nil, fmt.Errorf("wire: read enroll frame: %w", unexpectedEOF(err))
		}
		hdr = append(hdr, one[0])
		if one[0] < 0x80 {
			break
		}
		if len(hdr) >= 3 { // 3 varint bytes cover MaxEnrollFrame
			return nil, fmt.Errorf("%w: enroll frame length", ErrFrameTooLarge)
		}
	}
	d := decoder{b: hdr}
	n := d.uvarint()
	if d.err != nil {
		return nil, fmt.Errorf("wire: read enroll frame: %w", d.err)
	}
	if n > MaxEnrollFrame {
		return nil, fmt.Errorf("%w: enroll frame of %d bytes, limit %d", ErrFrameTooLarge, n, MaxEnrollFrame)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, fmt.Errorf("wire: read enroll frame: %w", unexpectedEOF(err))
	}
	if k, err := r.Read(one[:]); k != 0 || err == nil {
		return nil, fmt.Errorf("wire: read enroll frame: %w: bytes after the frame", ErrMalformed)
	}
	return p, nil
}

// unexpectedEOF makes a stream that ends inside a frame malformed input;
// other read errors (a reset stream, a deadline) stay what they are.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", ErrMalformed, io.ErrUnexpectedEOF)
	}
	return err
}

// EnrollServerTLSConfig derives the enrollment configuration from a
// server's agent configuration (ServerTLSConfig): same certificate and
// CAs, ALPN EnrollALPN only, a client certificate optional but verified
// when given (and then it must name a device), no session tickets and so
// no resumption or 0-RTT. base is cloned; it is not changed.
func EnrollServerTLSConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.GetConfigForClient = nil
	c.NextProtos = []string{EnrollALPN}
	c.ClientAuth = tls.VerifyClientCertIfGiven
	c.SessionTicketsDisabled = true
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		_, err := DeviceIDFromCert(cs.PeerCertificates[0])
		return err
	}
	return c
}

// OffersEnroll reports whether a ClientHello asks for EnrollALPN: the
// server then answers with EnrollServerTLSConfig.
func OffersEnroll(hello *tls.ClientHelloInfo) bool {
	return slices.Contains(hello.SupportedProtos, EnrollALPN)
}

// EnrollClientTLSConfig returns an agent's configuration for enrolling
// (cert nil: no client certificate) or renewing (cert: the current device
// certificate): servers verified against roots under serverName (empty
// means ClusterServerName), ALPN EnrollALPN, no session cache.
func EnrollClientTLSConfig(roots *x509.CertPool, cert *tls.Certificate, serverName string) *tls.Config {
	if serverName == "" {
		serverName = ClusterServerName
	}
	c := &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    roots,
		ServerName: serverName,
		NextProtos: []string{EnrollALPN},
	}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}
