package cluster

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/meteor-edge/meteor/cluster/api"
	"github.com/meteor-edge/meteor/fsm/intent"
)

// readBody reads a request's body of at most limit bytes. A longer one
// is answered 413 request_too_large naming the limit, before any of it is
// read when its Content-Length says so; what names the body in errors.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, what string) ([]byte, *api.Error) {
	if r.ContentLength > limit {
		return nil, tooLarge(what, limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, tooLarge(what, limit)
	case err != nil:
		return nil, badRequest("read %s: %v", what, err)
	}
	return body, nil
}

// tooLarge is the 413 of a body over limit bytes.
func tooLarge(what string, limit int64) *api.Error {
	return &api.Error{StatusCode: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge,
		Message: fmt.Sprintf("%s larger than the limit of %s", what, byteCount(limit))}
}

// byteCount says "1048576 bytes (1 MiB)".
func byteCount(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d bytes (%d MiB)", n, n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d bytes (%d KiB)", n, n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// readIntentBody reads the intent documents of a request (PUT
// /v1/intents/{name}, POST /v1/plan), at most intent.MaxDocumentSize.
// A body sent as application/json must be JSON: its syntax error is the
// JSON parser's, whatever its first byte (intent.Parse judges a body by
// its first byte otherwise).
func readIntentBody(w http.ResponseWriter, r *http.Request) ([]byte, *api.Error) {
	body, e := readBody(w, r, intent.MaxDocumentSize, "intent document")
	if e != nil {
		return nil, e
	}
	if sentAsJSON(r) {
		if err := intent.CheckJSON(body, 0); err != nil {
			return nil, badRequest("%v", err)
		}
	}
	return body, nil
}

// sentAsJSON reports whether a request's Content-Type is JSON.
func sentAsJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && (mt == "application/json" || mt == "text/json")
}
