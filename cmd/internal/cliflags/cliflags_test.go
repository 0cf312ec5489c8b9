package cliflags

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLogs: with --log-json every line is a JSON object carrying the
// message and the keys; without it a text line; a level that does not
// exist is refused.
func TestLogs(t *testing.T) {
	var buf bytes.Buffer
	logger, err := (&Logs{Level: "info", JSON: true}).Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	logger.Named("session").Info("session established", "device", "pos-1", "session", "ab12", "revision", 7)
	logger.Debug("not shown at info")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON line: %v\n%s", err, buf.String())
	}
	for k, want := range map[string]any{"@message": "session established", "@module": "meteor.session", "@level": "info", "device": "pos-1", "session": "ab12", "revision": float64(7)} {
		if line[k] != want {
			t.Errorf("%s = %v, want %v (%s)", k, line[k], want, buf.String())
		}
	}
	buf.Reset()
	text, _ := (&Logs{Level: "warn"}).Logger(&buf)
	text.Warn("dial failed", "server_addr", "10.0.0.1:8473")
	if s := buf.String(); strings.HasPrefix(s, "{") || !strings.Contains(s, "[WARN]  meteor: dial failed: server_addr=10.0.0.1:8473") {
		t.Errorf("text line: %q", s)
	}
	if _, err := (&Logs{Level: "loud"}).Logger(&buf); err == nil || !strings.Contains(err.Error(), `--log-level "loud"`) {
		t.Errorf("an unknown level: %v", err)
	}
}

func TestKeyValues(t *testing.T) {
	got, err := KeyValues("--labels", "region=eu, site=store-42,empty=")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"region": "eu", "site": "store-42", "empty": ""}, got); diff != "" {
		t.Error(diff)
	}
	if got, err := KeyValues("--scope", " "); err != nil || len(got) != 0 {
		t.Errorf("blank = %v, %v; want an empty map", got, err)
	}
	for _, bad := range []string{"a=1,a=2", "region", "=eu"} {
		if _, err := KeyValues("--labels", bad); err == nil || !strings.HasPrefix(err.Error(), "--labels: ") {
			t.Errorf("KeyValues(%q) = %v, want an error naming the flag", bad, err)
		}
	}
}
