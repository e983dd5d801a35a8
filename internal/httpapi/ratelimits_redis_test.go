package httpapi_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// testRedisAddr is host:port of the Redis the tests use
// (TOOLGATE_TEST_REDIS, by default redis://127.0.0.1:6379).
func testRedisURL() string {
	if u := os.Getenv("TOOLGATE_TEST_REDIS"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379"
}

// redisPrefix returns a fresh key prefix whose keys are deleted when the
// test ends.
func redisPrefix(t *testing.T) string {
	var b [8]byte
	rand.Read(b[:])
	prefix := "toolgate-test:" + hex.EncodeToString(b[:]) + ":"
	o, err := goredis.ParseURL(testRedisURL())
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return prefix
}

// proxy forwards TCP connections to Redis until closed, to take Redis
// "down" under a running serve.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// TestRateLimitPerKindsRedis runs the per-kind scenario of
// TestRateLimitPerKinds on ratelimit.backend redis, then shows two serves
// sharing one Redis share the buckets: the burst is spent across both.
func TestRateLimitPerKindsRedis(t *testing.T) {
	tail := perKindsPolicy + "ratelimit: {backend: redis, url: '" + testRedisURL() + "', key_prefix: '" + redisPrefix(t) + "'}\n"
	a := startServeWith(t, false, tail)
	checkPerKinds(t, a)
	// A second replica on the same Redis and prefix sees the spent budgets.
	b := startServeWith(t, false, tail)
	for _, who := range []string{"alice", "bob"} {
		r := b.do(t, who, "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.limited"})
		if r.status != 429 || !strings.Contains(string(r.body), `"ratelimits[1]"`) {
			t.Fatalf("replica b, %s limited: %d %s, want the shared per: tool bucket spent", who, r.status, r.body)
		}
	}
}

// TestRateLimitRedisDown: when Redis goes away under a running serve, a
// rate-limited call is refused with ratelimit_unavailable (503, fail closed)
// by default, and let through with on_unavailable: allow; calls of tools
// without a rate limit are unaffected.
func TestRateLimitRedisDown(t *testing.T) {
	o, err := goredis.ParseURL(testRedisURL())
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"deny", "allow"} {
		t.Run(mode, func(t *testing.T) {
			px := startProxy(t, o.Addr)
			tail := perKindsPolicy + "ratelimit: {backend: redis, url: 'redis://" + px.ln.Addr().String() + "', on_unavailable: " + mode + ", key_prefix: '" + redisPrefix(t) + "'}\n"
			s := startServeWith(t, false, tail)
			if r := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo"}); r.status != 200 {
				t.Fatalf("with Redis up: %d %s", r.status, r.body)
			}
			px.close()
			r := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo"})
			var env struct{ Error string }
			switch mode {
			case "deny":
				r.json(t, &env)
				if r.status != 503 || env.Error != "ratelimit_unavailable" {
					t.Fatalf("Redis down, deny: %d %s, want 503 ratelimit_unavailable", r.status, r.body)
				}
			case "allow":
				if r.status != 200 {
					t.Fatalf("Redis down, allow: %d %s, want 200", r.status, r.body)
				}
			}
		})
	}
}
