package api_test

import (
	"testing"

	"github.com/meteor-edge/meteor/cluster/api"
)

func TestBaseURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080":            "http://127.0.0.1:8080",
		"127.0.0.1:8080/":           "http://127.0.0.1:8080",
		"http://10.0.0.1:8080":      "http://10.0.0.1:8080",
		"https://meteor.example/":   "https://meteor.example",
		"https://meteor.example/x/": "https://meteor.example/x",
	} {
		if got := api.BaseURL(addr); got != want {
			t.Errorf("BaseURL(%q) = %q, want %q", addr, got, want)
		}
		if got := api.NewClient(addr, nil).Addr(); got != want {
			t.Errorf("NewClient(%q).Addr() = %q, want %q", addr, got, want)
		}
	}
}
