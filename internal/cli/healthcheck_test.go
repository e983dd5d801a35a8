package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// toolgate healthcheck (the Dockerfile's HEALTHCHECK) exits 0 only when
// the URL answers 200: 1 for another status or no server, 2 for a bad URL.
func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	if code, out, errOut := run(t, "", "healthcheck", "--url", srv.URL+"/healthz"); code != ExitOK || out != "ok\n" {
		t.Fatalf("healthy: %d %q %q", code, out, errOut)
	}
	status = http.StatusServiceUnavailable
	if code, _, errOut := run(t, "", "healthcheck", "--url", srv.URL+"/healthz"); code != ExitFailure || !strings.Contains(errOut, "503") {
		t.Fatalf("503: %d %q", code, errOut)
	}
	url := srv.URL
	srv.Close()
	if code, _, errOut := run(t, "", "healthcheck", "--url", url+"/healthz", "--timeout", "2s"); code != ExitFailure || !strings.Contains(errOut, "healthcheck") {
		t.Fatalf("no server: %d %q", code, errOut)
	}
	if code, _, _ := run(t, "", "healthcheck", "--url", "ftp://x/healthz"); code != ExitUsage {
		t.Fatalf("bad URL: %d", code)
	}
}
