package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/cli"
)

// The Dockerfile cannot be built here (no registry for its base images),
// so its promises are checked as text (issue 16 point 6): multi-stage, a
// distroless or scratch final stage, a non-root USER, the static
// -trimpath build with release.sh's version variable, and a HEALTHCHECK
// whose command line toolgate accepts and which passes against a /healthz
// that answers 200.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var from []string
	var user, health string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "FROM":
			from = append(from, line)
		case "USER":
			user = f[1]
		case "HEALTHCHECK":
			health = line
		}
	}
	if len(from) < 2 || !strings.HasSuffix(from[0], " AS build") {
		t.Errorf("not a multi-stage build: %q", from)
	}
	if last := from[len(from)-1]; !strings.Contains(last, "distroless/static") && !strings.Contains(last, "scratch") {
		t.Errorf("final stage %q: want distroless/static or scratch", last)
	}
	if user == "" || user == "root" || strings.HasPrefix(user, "0:") || user == "0" {
		t.Errorf("USER %q: want a non-root user", user)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath"} {
		if !strings.Contains(text, want) {
			t.Errorf("the build has no %s", want)
		}
	}
	xflag := regexp.MustCompile(`-X (\S+)=`)
	rel, err := os.ReadFile("../../scripts/release.sh")
	if err != nil {
		t.Fatal(err)
	}
	d, r := xflag.FindStringSubmatch(text), xflag.FindStringSubmatch(string(rel))
	if d == nil || r == nil || d[1] != r[1] {
		t.Errorf("version variable: Dockerfile %v, release.sh %v (release.sh's is tested to work)", d, r)
	}

	_, cmdJSON, ok := strings.Cut(health, " CMD ")
	var argv []string
	if !ok || json.Unmarshal([]byte(strings.TrimSpace(cmdJSON)), &argv) != nil || len(argv) < 2 || argv[0] != "/usr/local/bin/toolgate" {
		t.Fatalf("HEALTHCHECK %q: want CMD [\"/usr/local/bin/toolgate\", \"healthcheck\", …] (exec form: the image has no shell)", health)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			io.WriteString(w, "ok\n")
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	args := append([]string(nil), argv[1:]...)
	for i := range args {
		if strings.HasSuffix(args[i], "/healthz") {
			args[i] = srv.URL + "/healthz"
		}
	}
	var out, errOut strings.Builder
	if code := cli.Main(context.Background(), args, strings.NewReader(""), &out, &errOut); code != cli.ExitOK {
		t.Errorf("HEALTHCHECK %v exits %d: %s", argv, code, errOut.String())
	}
}
