package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Profile streams one of the server's Go profiles into w (GET
// /debug/pprof/<name>, served only with --enable-debug and only to
// admins) and returns the bytes written. name is a profile pprof knows
// ("heap", "goroutine", "allocs", "profile" for CPU...); q its parameters
// ("gc=1" collects before a heap profile, "seconds=N" for CPU). The body is
// the profile in pprof's format, for `go tool pprof`.
func (c *Client) Profile(ctx context.Context, name string, q url.Values, w io.Writer) (int64, error) {
	path := "/debug/pprof/" + url.PathEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	c.authorize(req)
	resp, err := c.streaming().Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode == http.StatusNotFound {
			return 0, fmt.Errorf("GET %s: 404: is the server running with --enable-debug?", path)
		}
		return 0, decodeError(http.MethodGet, path, resp.StatusCode, data)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("GET %s: after %d bytes: %w", path, n, err)
	}
	return n, nil
}
