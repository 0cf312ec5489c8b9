package intent

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// builtinTypes are the resource types the agent has drivers for, sorted.
var builtinTypes = []string{TypeCertificate, TypeExec, TypeFile, TypeSim}

// Spec and probe rules of the built-in types. The agent drivers implement
// what this table promises; keep the two in step. Keys not listed are
// errors. A key set to null counts as absent. "argv" is a non-empty list
// of strings whose first element is an absolute path or a bare command
// name looked up in the agent's PATH.
//
//	type         field          rule
//	file         path           required; absolute, clean, not "/"
//	             content        string; required unless contentBase64 is set
//	             contentBase64  standard base64; excludes content
//	             mode           octal string such as "0644", at most "07777"
//	  probe      type           "content" (the default): re-read the file and
//	                            compare it with the desired content
//	exec         check          required argv; exits 0 when the state holds
//	             apply          required argv; brings the state about
//	             timeout        Go duration, > 0 and <= 1h, for each command
//	             env            mapping of NAME ([A-Za-z_][A-Za-z0-9_]*) to
//	                            string, added to the commands' environment
//	  probe      command        required argv; exits 0 when the state is
//	                            effective (default probe: run check)
//	certificate  certPath       required; absolute, clean; the PEM chain
//	             keyPath        required; absolute, clean, not certPath
//	             cert           required PEM, one or more CERTIFICATE blocks
//	                            that parse as X.509, leaf first
//	             key            required PEM, one unencrypted "... PRIVATE KEY"
//	                            block (PKCS #1, PKCS #8 or SEC 1) that
//	                            matches the leaf certificate
//	  probe      address        required host:port whose TLS server must
//	                            present the leaf (default probe: the files)
//	             serverName     host name to send as SNI; default the host
//	sim          value          required string, number or boolean: the
//	                            simulated state
//	             applyTime      Go duration >= 0 an apply takes
//	             failureRate    number in [0,1]: chance an apply fails
//	  probe      driftRate      number in [0,1]: chance a probe finds drift
func (c *checker) typeRules(p path, r *Resource) {
	if sp := p.field("spec"); r.Spec == nil {
		c.fail(sp, "required")
	} else {
		c.specRules(sp, r.Type, r.Spec)
	}
	if r.Probe != nil {
		c.probeRules(p.field("probe"), r.Type, r.Probe)
	}
}

func (c *checker) specRules(p path, typ string, spec map[string]any) {
	switch typ {
	case TypeFile:
		c.fileSpec(p, spec)
	case TypeExec:
		c.keys(p, spec, "apply", "check", "env", "timeout")
		c.argv(p, spec, "check")
		c.argv(p, spec, "apply")
		c.duration(p, spec, "timeout", false, time.Hour)
		c.env(p, spec)
	case TypeCertificate:
		c.certSpec(p, spec)
	case TypeSim:
		c.keys(p, spec, "applyTime", "failureRate", "value")
		switch v := spec["value"].(type) {
		case nil:
			c.fail(p.field("value"), "required")
		case string, bool, int, int64, float64:
		default:
			c.fail(p.field("value"), "must be a string, number or boolean, got %s", kindOf(v))
		}
		c.duration(p, spec, "applyTime", true, 0)
		c.fraction(p, spec, "failureRate")
	}
}

func (c *checker) probeRules(p path, typ string, probe map[string]any) {
	switch typ {
	case TypeFile:
		c.keys(p, probe, "type")
		if t, ok := c.str(p, probe, "type", false); ok && t != "content" {
			c.fail(p.field("type"), "unknown probe type %s; allowed: content", quote(t))
		}
	case TypeExec:
		c.keys(p, probe, "command")
		c.argv(p, probe, "command")
	case TypeCertificate:
		c.keys(p, probe, "address", "serverName")
		if addr, ok := c.str(p, probe, "address", true); ok && !isHostPort(addr) {
			c.fail(p.field("address"), `must be host:port, such as "127.0.0.1:8443"`)
		}
		if name, ok := c.str(p, probe, "serverName", false); ok && !isHostName(name) {
			c.fail(p.field("serverName"), "must be a host name")
		}
	case TypeSim:
		c.keys(p, probe, "driftRate")
		c.fraction(p, probe, "driftRate")
	}
}

func (c *checker) fileSpec(p path, spec map[string]any) {
	c.keys(p, spec, "content", "contentBase64", "mode", "path")
	if s, ok := c.str(p, spec, "path", true); ok {
		c.absPath(p.field("path"), s)
	}
	_, hasText := c.str(p, spec, "content", false)
	b64, hasB64 := c.str(p, spec, "contentBase64", false)
	switch {
	case hasText && hasB64:
		c.fail(p.field("contentBase64"), "conflicts with content; set one of them")
	case hasB64:
		if _, err := base64.StdEncoding.Strict().DecodeString(b64); err != nil {
			c.fail(p.field("contentBase64"), "invalid base64: %v", err)
		}
	case spec["content"] == nil && spec["contentBase64"] == nil:
		c.fail(p.field("content"), "required unless contentBase64 is set")
	}
	switch mode := spec["mode"].(type) {
	case nil:
	case string:
		if n, err := strconv.ParseUint(mode, 8, 32); err != nil || n > 0o7777 || len(mode) > 5 {
			c.fail(p.field("mode"), `must be an octal string such as "0644", at most "07777"`)
		}
	default:
		c.fail(p.field("mode"), `must be an octal string such as "0644" (quote it), got %s`, kindOf(mode))
	}
}

func (c *checker) certSpec(p path, spec map[string]any) {
	c.keys(p, spec, "cert", "certPath", "key", "keyPath")
	certPath, ok := c.str(p, spec, "certPath", true)
	if ok {
		c.absPath(p.field("certPath"), certPath)
	}
	if keyPath, ok := c.str(p, spec, "keyPath", true); ok {
		if keyPath == certPath {
			c.fail(p.field("keyPath"), "must differ from certPath")
		} else {
			c.absPath(p.field("keyPath"), keyPath)
		}
	}
	var leaf *x509.Certificate
	if s, ok := c.str(p, spec, "cert", true); ok {
		var msg string
		if leaf, msg = parseCertChain(s); msg != "" {
			c.fail(p.field("cert"), "%s", msg)
		}
	}
	if s, ok := c.str(p, spec, "key", true); ok {
		pub, msg := parsePrivateKey(s)
		if msg == "" && leaf != nil {
			if k, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(pub) {
				msg = "does not match the certificate"
			}
		}
		if msg != "" {
			c.fail(p.field("key"), "%s", msg)
		}
	}
}

// parseCertChain returns the first certificate of a PEM chain, or what is
// wrong with the chain.
func parseCertChain(s string) (*x509.Certificate, string) {
	rest := []byte(s)
	var leaf *x509.Certificate
	for n := 1; ; n++ {
		block, r := pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Sprintf("PEM block %d is %s, want CERTIFICATE", n, quote(block.Type))
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Sprintf("PEM block %d: %v", n, err)
		}
		if leaf == nil {
			leaf = cert
		}
		rest = r
	}
	switch {
	case leaf == nil:
		return nil, "must hold a PEM CERTIFICATE block"
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, "unexpected data after the last PEM block"
	}
	return leaf, ""
}

// parsePrivateKey returns the public half of a PEM private key, or what is
// wrong with it.
func parsePrivateKey(s string) (crypto.PublicKey, string) {
	block, rest := pem.Decode([]byte(s))
	switch {
	case block == nil:
		return nil, "must hold a PEM PRIVATE KEY block"
	case !strings.HasSuffix(block.Type, "PRIVATE KEY"):
		return nil, fmt.Sprintf("PEM block is %s, want a PRIVATE KEY", quote(block.Type))
	case block.Type == "ENCRYPTED PRIVATE KEY" || strings.Contains(block.Headers["Proc-Type"], "ENCRYPTED"):
		return nil, "encrypted keys are not supported"
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, "must hold exactly one PEM block"
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Sprintf("invalid %s: %v", block.Type, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Sprintf("unsupported key type %T", key)
	}
	return signer.Public(), ""
}

// keys reports every key of m not in allowed (sorted).
func (c *checker) keys(p path, m map[string]any, allowed ...string) {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(allowed, k) {
			c.fail(p.field(k), "unknown field; allowed: %s", strings.Join(allowed, ", "))
		}
	}
}

// str returns m[key] if it is a string. It reports a missing key when
// required and a value of another kind; ok is false in both cases.
func (c *checker) str(p path, m map[string]any, key string, required bool) (s string, ok bool) {
	switch v := m[key].(type) {
	case nil:
		if required {
			c.fail(p.field(key), "required")
		}
		return "", false
	case string:
		return v, true
	default:
		c.fail(p.field(key), "must be a string, got %s", kindOf(v))
		return "", false
	}
}

func (c *checker) absPath(p path, s string) {
	switch {
	case s == "":
		c.fail(p, "required")
	case strings.IndexByte(s, 0) >= 0:
		c.fail(p, "must not contain NUL")
	case !pathpkg.IsAbs(s):
		c.fail(p, "must be absolute")
	case s == "/":
		c.fail(p, `must not be "/"`)
	case pathpkg.Clean(s) != s:
		c.fail(p, "must be clean, want %q", pathpkg.Clean(s))
	}
}

// argv checks the required m[key] as a command line.
func (c *checker) argv(p path, m map[string]any, key string) {
	kp := p.field(key)
	v := m[key]
	if v == nil {
		c.fail(kp, "required")
		return
	}
	list, ok := v.([]any)
	if !ok {
		c.fail(kp, "must be a list of strings, got %s", kindOf(v))
		return
	}
	if len(list) == 0 {
		c.fail(kp, "must not be empty")
		return
	}
	for i, e := range list {
		s, ok := e.(string)
		switch {
		case !ok:
			c.fail(kp.index(i), "must be a string, got %s", kindOf(e))
		case strings.IndexByte(s, 0) >= 0:
			c.fail(kp.index(i), "must not contain NUL")
		case i > 0:
		case s == "":
			c.fail(kp.index(i), "must not be empty")
		case strings.Contains(s, "/"):
			if !pathpkg.IsAbs(s) {
				c.fail(kp.index(i), "must be an absolute path or a bare command name")
			} else {
				c.absPath(kp.index(i), s)
			}
		}
	}
}

// duration checks the optional m[key] as a Go duration string: > 0
// unless zeroOK, and at most max unless max is 0. It returns the duration
// and true when m[key] is set and passes.
func (c *checker) duration(p path, m map[string]any, key string, zeroOK bool, max time.Duration) (time.Duration, bool) {
	kp := p.field(key)
	var d time.Duration
	switch v := m[key].(type) {
	case nil:
		return 0, false
	case string:
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			c.fail(kp, `must be a duration such as "30s", got %s`, quote(v))
			return 0, false
		}
	default:
		c.fail(kp, `must be a duration such as "30s", got %s`, kindOf(v))
		return 0, false
	}
	switch {
	case d < 0 && zeroOK:
		c.fail(kp, "must not be negative")
	case d <= 0 && !zeroOK:
		c.fail(kp, "must be greater than 0")
	case max > 0 && d > max:
		c.fail(kp, "must be at most %v", max)
	default:
		return d, true
	}
	return 0, false
}

// fraction checks m[key] as an optional number in [0, 1].
func (c *checker) fraction(p path, m map[string]any, key string) {
	var f float64
	switch v := m[key].(type) {
	case nil:
		return
	case int:
		f = float64(v)
	case int64:
		f = float64(v)
	case float64:
		f = v
	default:
		c.fail(p.field(key), "must be a number, got %s", kindOf(v))
		return
	}
	if !(f >= 0 && f <= 1) {
		c.fail(p.field(key), "must be between 0 and 1")
	}
}

func (c *checker) env(p path, m map[string]any) {
	kp := p.field("env")
	switch env := m["env"].(type) {
	case nil:
	case map[string]any:
		for _, name := range sortedKeys(env) {
			if !isEnvName(name) {
				c.fail(kp.field(name), "invalid variable name; want [A-Za-z_][A-Za-z0-9_]*")
			} else if _, ok := env[name].(string); !ok {
				c.fail(kp.field(name), "must be a string, got %s", kindOf(env[name]))
			}
		}
	default:
		c.fail(kp, "must be a mapping, got %s", kindOf(env))
	}
}

func isEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')) {
			return false
		}
	}
	return s != ""
}

// isHostPort reports whether s is host:port or [ipv6]:port with a port in
// 1-65535. (Package net is off limits here.)
func isHostPort(s string) bool {
	var host, port string
	if rest, ok := strings.CutPrefix(s, "["); ok {
		h, p, ok := strings.Cut(rest, "]:")
		if !ok || !strings.Contains(h, ":") || strings.Trim(h, "0123456789abcdefABCDEF:.") != "" {
			return false
		}
		host, port = h, p
	} else {
		i := strings.LastIndexByte(s, ':')
		if i < 0 || !isHostName(s[:i]) {
			return false
		}
		host, port = s[:i], s[i+1:]
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return host != "" && err == nil && n > 0
}

// isHostName reports whether s is a DNS name or IPv4 address: labels of
// letters, digits and '-' joined by dots, at most 253 characters.
func isHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !isLabel(label, 63, func(c byte) bool { return isAlnum(c) || c == '-' }) {
			return false
		}
	}
	return true
}

// kindOf names the kind of a free-form value, for error messages.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case int, int64:
		return "integer"
	case float64:
		return "number"
	case []any:
		return "list"
	case map[string]any:
		return "mapping"
	default:
		return fmt.Sprintf("%T", v)
	}
}
