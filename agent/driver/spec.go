package driver

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// Helpers reading driver fields out of a resource's Spec or Probe map.
// Maps come from YAML or JSON decoding, so lists arrive as []any and
// numbers as int or float64; the helpers accept both shapes.

// specErr returns an error wrapping ErrInvalidSpec naming the resource.
func specErr(r intent.Resource, format string, args ...any) error {
	return fmt.Errorf("%s resource %q: %w: %s", r.Type, r.ID, ErrInvalidSpec, fmt.Sprintf(format, args...))
}

// getString returns m[key] as a string; ok is false when the key is absent.
func getString(r intent.Resource, m map[string]any, key string) (s string, ok bool, err error) {
	v, ok := m[key]
	if !ok || v == nil {
		return "", false, nil
	}
	s, isString := v.(string)
	if !isString {
		return "", false, specErr(r, "%s must be a string, got %T", key, v)
	}
	return s, true, nil
}

// requireString is getString for mandatory non-empty fields.
func requireString(r intent.Resource, m map[string]any, key string) (string, error) {
	s, ok, err := getString(r, m, key)
	if err != nil {
		return "", err
	}
	if !ok || s == "" {
		return "", specErr(r, "%s is required", key)
	}
	return s, nil
}

// getArgv returns m[key] as a non-empty list of strings.
func getArgv(r intent.Resource, m map[string]any, key string) (argv []string, ok bool, err error) {
	v, ok := m[key]
	if !ok || v == nil {
		return nil, false, nil
	}
	switch l := v.(type) {
	case []string:
		argv = append([]string(nil), l...)
	case []any:
		argv = make([]string, len(l))
		for i, e := range l {
			s, isString := e.(string)
			if !isString {
				return nil, false, specErr(r, "%s[%d] must be a string, got %T", key, i, e)
			}
			argv[i] = s
		}
	default:
		return nil, false, specErr(r, "%s must be a list of strings (argv), got %T", key, v)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, false, specErr(r, "%s must name a program", key)
	}
	return argv, true, nil
}

// getStringMap returns m[key] as a map of strings.
func getStringMap(r intent.Resource, m map[string]any, key string) (map[string]string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return nil, nil
	}
	switch mm := v.(type) {
	case map[string]string:
		return mm, nil
	case map[string]any:
		out := make(map[string]string, len(mm))
		for k, e := range mm {
			s, isString := e.(string)
			if !isString {
				return nil, specErr(r, "%s.%s must be a string, got %T", key, k, e)
			}
			out[k] = s
		}
		return out, nil
	default:
		return nil, specErr(r, "%s must be a map of strings, got %T", key, v)
	}
}

// getDuration parses m[key] as a Go duration string, def when absent.
func getDuration(r intent.Resource, m map[string]any, key string, def time.Duration) (time.Duration, error) {
	s, ok, err := getString(r, m, key)
	if err != nil || !ok {
		return def, err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, specErr(r, "%s %q is not a non-negative duration like \"30s\"", key, s)
	}
	return d, nil
}

// getFloat returns m[key] as a float64, def when absent.
func getFloat(r intent.Resource, m map[string]any, key string, def float64) (float64, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return def, nil
	}
	switch n := v.(type) {
	case float64:
		return n, nil
	case float32:
		return float64(n), nil
	case int:
		return float64(n), nil
	case int64:
		return float64(n), nil
	case uint64:
		return float64(n), nil
	default:
		return 0, specErr(r, "%s must be a number, got %T", key, v)
	}
}

// scalarString renders a scalar spec value canonically, so that the same
// number decoded from YAML (int) or JSON (float64) compares equal. Values
// compare as text: the number 3 equals the string "3".
func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.FormatInt(int64(x), 10), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case int32:
		return strconv.FormatInt(int64(x), 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), nil
	default:
		return "", fmt.Errorf("value must be a scalar (string, number or bool), got %T", v)
	}
}

// resolvePath checks that p is absolute and places it beneath root.
func resolvePath(r intent.Resource, root, key, p string) (rootedPath, error) {
	if !filepath.IsAbs(p) {
		return rootedPath{}, specErr(r, "%s %q must be absolute", key, p)
	}
	p = filepath.Clean(p)
	if p == "/" {
		return rootedPath{}, specErr(r, "%s must name a file, not /", key)
	}
	return rootedPath{root: root, rel: p[1:]}, nil
}

// short abbreviates a hex digest for messages.
func short(hexDigest string) string {
	if len(hexDigest) <= 16 {
		return hexDigest
	}
	return hexDigest[:16] + "…"
}

// joinReasons renders Diff.Reasons as one line.
func joinReasons(reasons []string) string { return strings.Join(reasons, "; ") }

// isSpecErr reports whether err is an invalid-spec error.
func isSpecErr(err error) bool { return errors.Is(err, ErrInvalidSpec) }
