package cluster

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/cluster/api"
)

// TestBodyLimitsAndSyntaxErrors, over TLS against a real server: a body
// over its limit is a 413 request_too_large naming the limit, whether
// its Content-Length says so or it arrives chunked; a broken intent
// document is reported in the format it was sent in: invalid JSON with
// the line and column when it opens a JSON object or is sent as
// application/json, invalid YAML otherwise.
func TestBodyLimitsAndSyntaxErrors(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.waitLeader()
	hc, base := c.HTTPClient(), c.HTTPURL(0)
	send := func(method, path, contentType string, body io.Reader) (int, api.Error) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var e api.Error
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			if err := json.Unmarshal(data, &e); err != nil {
				t.Fatalf("%s %s: %d, body %q is not an error", method, path, resp.StatusCode, data)
			}
		}
		return resp.StatusCode, e
	}
	big := func(n int) []byte { return bytes.Repeat([]byte("#"), n) }
	// chunked hides the length: the server finds out by reading.
	chunked := func(b []byte) io.Reader { return io.MultiReader(bytes.NewReader(b)) }

	for _, tc := range []struct {
		name, method, path string
		body               io.Reader
		limit              string
	}{
		{"intent, 10 MB", http.MethodPut, "/v1/intents/motd", bytes.NewReader(big(10 << 20)), "1048576 bytes (1 MiB)"},
		{"intent, 1 MiB + 1 chunked", http.MethodPut, "/v1/intents/motd", chunked(big(1<<20 + 1)), "1048576 bytes (1 MiB)"},
		{"plan, 10 MB chunked", http.MethodPost, "/v1/plan", chunked(big(10 << 20)), "1048576 bytes (1 MiB)"},
		{"rollout action, 3 MB", http.MethodPost, "/v1/rollouts/motd/pause", bytes.NewReader(big(3 << 20)), "2097152 bytes (2 MiB)"},
	} {
		code, e := send(tc.method, tc.path, "", tc.body)
		if code != http.StatusRequestEntityTooLarge || e.Code != api.CodeTooLarge || !strings.Contains(e.Message, "limit of "+tc.limit) {
			t.Errorf("%s: %d %s %q; want 413 %s naming %s", tc.name, code, e.Code, e.Message, api.CodeTooLarge, tc.limit)
		}
	}
	// At the limit, a document is read and judged on its content.
	if code, e := send(http.MethodPut, "/v1/intents/motd", "", bytes.NewReader(big(1<<20))); code != http.StatusBadRequest {
		t.Errorf("intent of exactly 1 MiB: %d %s %q; want 400", code, e.Code, e.Message)
	}

	truncated := "{\"name\": \"motd\",\n \"resources\": [\n"
	for _, tc := range []struct {
		name, contentType, body, want string
	}{
		{"truncated JSON sent as YAML", "application/yaml", truncated, "intent: invalid JSON: unexpected end of JSON input (line 2, column 16)"},
		{"truncated JSON sent as JSON", "application/json", truncated, "intent: invalid JSON: unexpected end of JSON input (line 2, column 16)"},
		{"YAML sent as JSON", "application/json; charset=utf-8", "name: motd\nresources: []\n", "intent: invalid JSON: invalid character 'a' in literal null (expecting 'u') (line 1, column 2)"},
		{"broken YAML", "application/yaml", "name: motd\nresources: [\n", "intent: invalid YAML: did not find expected node content (line 2)"},
	} {
		code, e := send(http.MethodPut, "/v1/intents/motd", tc.contentType, strings.NewReader(tc.body))
		if code != http.StatusBadRequest || e.Code != api.CodeBadRequest || e.Message != tc.want {
			t.Errorf("%s: %d %s %q; want 400 %q", tc.name, code, e.Code, e.Message, tc.want)
		}
	}
	code, e := send(http.MethodPost, "/v1/plan", "", strings.NewReader("{\"name\": \"a\", \"resources\": []}\n---\n{\"name\": \"b\",\n"))
	if code != http.StatusBadRequest || !strings.HasPrefix(e.Message, "intent: invalid JSON: unexpected end of JSON input (line 3, ") {
		t.Errorf("plan of a truncated JSON stream: %d %q", code, e.Message)
	}
}
