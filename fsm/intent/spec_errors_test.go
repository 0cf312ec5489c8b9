package intent

import "strings"

// specBadDocs break the rules of the built-in resource types (spec.go).
var specBadDocs = []struct {
	name string
	doc  string
	want string
}{
	{
		name: "file path relative",
		doc: `name: store-net
resources:
  - id: ruleset
    type: file
    spec:
      content: "table inet x {}"
      path: etc/nftables.d/x.nft
`,
		want: `intent "store-net": resources[0].spec.path: must be absolute (line 7)`,
	},
	{
		name: "file path not clean",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: file\n    spec: {path: /etc/../etc/a.conf, content: x}\n",
		want: `intent "store-net": resources[0].spec.path: must be clean, want "/etc/a.conf" (line 5)`,
	},
	{
		name: "file path missing",
		doc: `name: store-net
resources:
  - id: a
    type: file
    spec:
      content: x
`,
		want: `intent "store-net": resources[0].spec.path: required (line 5)`,
	},
	{
		name: "file content missing",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: file\n    spec:\n      path: /etc/a\n      mode: \"0644\"\n",
		want: `intent "store-net": resources[0].spec.content: required unless contentBase64 is set (line 5)`,
	},
	{
		name: "file content twice",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: file\n    spec:\n      path: /etc/a\n      content: x\n      contentBase64: eA==\n",
		want: `intent "store-net": resources[0].spec.contentBase64: conflicts with content; set one of them (line 8)`,
	},
	{
		name: "file bad base64",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: file\n    spec:\n      path: /etc/a\n      contentBase64: eA=\n",
		want: `intent "store-net": resources[0].spec.contentBase64: invalid base64: illegal base64 data at input byte 3 (line 7)`,
	},
	{
		name: "file mode unquoted",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: file\n    spec:\n      path: /etc/a\n      content: x\n      mode: 0644\n",
		want: `intent "store-net": resources[0].spec.mode: must be an octal string such as "0644" (quote it), got integer (line 8)`,
	},
	{
		name: "file mode not octal",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: file\n    spec:\n      path: /etc/a\n      content: x\n      mode: \"0964\"\n",
		want: `intent "store-net": resources[0].spec.mode: must be an octal string such as "0644", at most "07777" (line 8)`,
	},
	{
		name: "file unknown spec field",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: file\n    spec:\n      path: /etc/a\n      content: x\n      owner: root\n",
		want: `intent "store-net": resources[0].spec.owner: unknown field; allowed: content, contentBase64, mode, path (line 8)`,
	},
	{
		name: "file probe type",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: file\n    spec: {path: /etc/a, content: x}\n    probe: {type: checksum}\n",
		want: `intent "store-net": resources[0].probe.type: unknown probe type "checksum"; allowed: content (line 6)`,
	},
	{
		name: "file string too long",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: file\n    spec:\n      path: /etc/a\n      content: " + strings.Repeat("x", MaxStringSize+1) + "\n",
		want: `intent "store-net": resources[0].spec.content: must be at most 262144 bytes, got 262145 (line 7)`,
	},
	{
		name: "exec check missing",
		doc: `name: store-net
resources:
  - id: load
    type: exec
    spec:
      apply: [nft, -f, /etc/nftables.d/x.nft]
`,
		want: `intent "store-net": resources[0].spec.check: required (line 5)`,
	},
	{
		name: "exec relative command",
		doc: `name: store-net
resources:
  - id: load
    type: exec
    spec:
      check: [nft, -c, -f, /etc/nftables.d/x.nft]
      apply:
        - ./load.sh
`,
		want: `intent "store-net": resources[0].spec.apply[0]: must be an absolute path or a bare command name (line 8)`,
	},
	{
		name: "exec argv not strings",
		doc:  "name: store-net\nresources:\n  - id: load\n    type: exec\n    spec:\n      check: [test, -e, /etc/a]\n      apply: [sleep, 5]\n",
		want: `intent "store-net": resources[0].spec.apply[1]: must be a string, got integer (line 7)`,
	},
	{
		name: "exec timeout too long",
		doc:  "name: store-net\nresources:\n  - id: load\n    type: exec\n    spec:\n      check: [\"true\"]\n      apply: [\"true\"]\n      timeout: 2h\n",
		want: `intent "store-net": resources[0].spec.timeout: must be at most 1h0m0s (line 8)`,
	},
	{
		name: "exec timeout not a duration",
		doc:  "name: store-net\nresources:\n  - id: load\n    type: exec\n    spec:\n      check: [\"true\"]\n      apply: [\"true\"]\n      timeout: 30\n",
		want: `intent "store-net": resources[0].spec.timeout: must be a duration such as "30s", got integer (line 8)`,
	},
	{
		name: "exec env name",
		doc:  "name: store-net\nresources:\n  - id: load\n    type: exec\n    spec:\n      check: [\"true\"]\n      apply: [\"true\"]\n      env:\n        LANG: C\n        2FA: off\n",
		want: `intent "store-net": resources[0].spec.env["2FA"]: invalid variable name; want [A-Za-z_][A-Za-z0-9_]* (line 10)`,
	},
	{
		name: "exec probe without command",
		doc:  "name: store-net\nresources:\n  - id: load\n    type: exec\n    spec: {check: [\"true\"], apply: [\"true\"]}\n    probe: {cmd: [\"true\"]}\n",
		want: `intent "store-net": resources[0].probe.cmd: unknown field; allowed: command (line 6)`,
	},
	{
		name: "sim value missing",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n    spec:\n      applyTime: 1s\n",
		want: `intent "store-net": resources[0].spec.value: required (line 5)`,
	},
	{
		name: "sim value not a scalar",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n    spec:\n      value: [1, 2]\n",
		want: `intent "store-net": resources[0].spec.value: must be a string, number or boolean, got list (line 6)`,
	},
	{
		name: "sim failure rate",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n    spec:\n      value: 1\n      failureRate: 1.5\n",
		want: `intent "store-net": resources[0].spec.failureRate: must be between 0 and 1 (line 7)`,
	},
	{
		name: "sim negative apply time",
		doc:  "name: store-net\nresources:\n  - id: a\n    type: sim\n    spec:\n      value: 1\n      applyTime: -1s\n",
		want: `intent "store-net": resources[0].spec.applyTime: must not be negative (line 7)`,
	},
}

// certDocs are bad certificate documents; withPEM fills in the PEM blocks.
var certDocs = []struct {
	name string
	doc  string
	want string
}{
	{
		name: "cert not PEM",
		doc: `name: pos
resources:
  - id: tls
    type: certificate
    spec:
      certPath: /etc/pos/tls.crt
      keyPath: /etc/pos/tls.key
      cert: not a certificate
      key: |
        {{key}}
`,
		want: `intent "pos": resources[0].spec.cert: must hold a PEM CERTIFICATE block (line 8)`,
	},
	{
		name: "key is a certificate",
		doc: `name: pos
resources:
  - id: tls
    type: certificate
    spec:
      certPath: /etc/pos/tls.crt
      keyPath: /etc/pos/tls.key
      key: |
        {{cert}}
      cert: |
        {{cert}}
`,
		want: `intent "pos": resources[0].spec.key: PEM block is "CERTIFICATE", want a PRIVATE KEY (line 8)`,
	},
	{
		name: "key of another certificate",
		doc: `name: pos
resources:
  - id: tls
    type: certificate
    spec:
      key: |
        {{other-key}}
      cert: |
        {{cert}}
      certPath: /etc/pos/tls.crt
      keyPath: /etc/pos/tls.key
`,
		want: `intent "pos": resources[0].spec.key: does not match the certificate (line 6)`,
	},
	{
		name: "same path twice",
		doc: `name: pos
resources:
  - id: tls
    type: certificate
    spec:
      certPath: /etc/pos/tls.pem
      keyPath: /etc/pos/tls.pem
      cert: |
        {{cert}}
      key: |
        {{key}}
`,
		want: `intent "pos": resources[0].spec.keyPath: must differ from certPath (line 7)`,
	},
	{
		name: "probe address",
		doc: `name: pos
resources:
  - id: tls
    type: certificate
    probe:
      address: 127.0.0.1
    spec:
      certPath: /etc/pos/tls.crt
      keyPath: /etc/pos/tls.key
      cert: |
        {{cert}}
      key: |
        {{key}}
`,
		want: `intent "pos": resources[0].probe.address: must be host:port, such as "127.0.0.1:8443" (line 6)`,
	},
}
