package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// scripts/release.sh (issue 16 point 6) builds, for the host platform, a
// static binary without build paths whose `version`, MCP initialize
// serverInfo.version and OpenWOP discovery implementation.version are all
// the version it was given; SHA256SUMS lists it; its healthcheck
// subcommand (the Dockerfile's HEALTHCHECK) passes against its own serve.
func TestReleaseScript(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("release.sh builds linux binaries; this host is %s", runtime.GOOS)
	}
	const version = "v0.0.0-releasetest.1"
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	start := time.Now()
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "release.sh"), version, out)
	cmd.Env = append(os.Environ(), "PLATFORMS=linux/"+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	t.Logf("release.sh for linux/%s took %s", runtime.GOARCH, time.Since(start).Round(time.Millisecond))
	name := "toolgate-" + version + "-linux-" + runtime.GOARCH
	bin := filepath.Join(out, name)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS")); err != nil || string(sums) != hex.EncodeToString(sum[:])+"  "+name+"\n" {
		t.Errorf("SHA256SUMS = %q, %v", sums, err)
	}
	if bytes.Contains(data, []byte(root)) {
		t.Errorf("the binary holds the build path %s (not built with -trimpath)", root)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v: it is not static", libs)
	}
	f.Close()

	if b, err := exec.Command(bin, "version").Output(); err != nil || string(b) != "toolgate "+version+"\n" {
		t.Fatalf("version = %q, %v", b, err)
	}

	// The server reports the same version.
	dir := t.TempDir()
	srv := exec.Command(bin, "serve", "--listen", "127.0.0.1:0")
	srv.Dir = dir
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	urls := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "toolgate: MCP gateway at "); ok {
				urls <- u
			}
			if k, ok := strings.CutPrefix(sc.Text(), "toolgate: API key (shown once): "); ok {
				urls <- k
			}
		}
	}()
	var url, key string
	for url == "" || key == "" {
		select {
		case s := <-urls:
			if strings.HasPrefix(s, "http://") {
				url = s
			} else {
				key = s
			}
		case <-time.After(60 * time.Second):
			srv.Process.Kill()
			srv.Wait() // then stderr is complete
			t.Fatalf("serve printed no URL and key; stderr: %s", stderr.String())
		}
	}
	base := strings.TrimSuffix(url, "/mcp")
	resp, err := http.Get(base + "/.well-known/openwop")
	if err != nil {
		t.Fatal(err)
	}
	var disc struct {
		Implementation struct{ Version string } `json:"implementation"`
	}
	err = json.NewDecoder(resp.Body).Decode(&disc)
	resp.Body.Close()
	if err != nil || disc.Implementation.Version != version {
		t.Errorf("discovery implementation.version = %q (%v), want %s", disc.Implementation.Version, err, version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := mcp.NewClient(&mcp.Implementation{Name: "release-test", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: keyTransport(key)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.InitializeResult().ServerInfo.Version; got != version {
		t.Errorf("MCP serverInfo.version = %q, want %s", got, version)
	}
	cs.Close()
	if b, err := exec.Command(bin, "healthcheck", "--url", base+"/healthz").CombinedOutput(); err != nil || string(b) != "ok\n" {
		t.Errorf("healthcheck against the running gateway: %v %q", err, b)
	}
	srv.Process.Signal(syscall.SIGTERM)
	if err := srv.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v; stderr: %s", err, stderr.String())
	}
}

// keyTransport adds the API key as a bearer token.
type keyTransport string

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}
