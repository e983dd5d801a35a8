package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/ratelimit/ratelimittest"
	"github.com/toolgate/toolgate/ratelimit/redis"
)

// redisURL is the Redis the tests use: TOOLGATE_TEST_REDIS, by default the
// machine's redis://127.0.0.1:6379. The tests fail, never skip, without it.
func redisURL() string {
	if u := os.Getenv("TOOLGATE_TEST_REDIS"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379"
}

// newLimiter returns a limiter on the test Redis under a fresh key prefix,
// whose keys are deleted when the test ends.
func newLimiter(t testing.TB, opts redis.Options) *redis.Limiter {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	opts.URL, opts.Prefix = redisURL(), "toolgate-test:"+hex.EncodeToString(b[:])+":"
	l, err := redis.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("Redis at %s is required: %v", redisURL(), err)
	}
	o, _ := goredis.ParseURL(redisURL())
	c := goredis.NewClient(o)
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, opts.Prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("clean up %s*: %v", opts.Prefix, err)
		}
		c.Close()
		l.Close()
	})
	return l
}

// TestRedisSuite runs the shared backend suite against Redis.
func TestRedisSuite(t *testing.T) {
	ratelimittest.Run(t, func(t *testing.T) ratelimit.MultiLimiter { return newLimiter(t, redis.Options{}) })
}

// TestRedisKeysExpire: a written bucket expires when it would be full again.
func TestRedisKeysExpire(t *testing.T) {
	l := newLimiter(t, redis.Options{})
	k := ratelimit.Key{Tenant: "a", Principal: "p", ToolID: "t", Rule: "ratelimits[0]"}
	if _, err := l.Take(t.Context(), k, ratelimit.Limit{Rate: 1, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	o, _ := goredis.ParseURL(redisURL())
	c := goredis.NewClient(o)
	defer c.Close()
	ttl, err := c.PTTL(t.Context(), l.Key(k)).Result()
	if err != nil || ttl <= 0 || ttl.Milliseconds() > 1001 {
		t.Fatalf("PTTL %v %v, want about the 1s until the bucket is full", ttl, err)
	}
}

// deadAddr returns a 127.0.0.1 address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRedisUnavailable: with Redis down, deny (the default) fails the take
// with ErrUnavailable and allow lets it through; both count it. New fails
// fast on an unreachable Redis.
func TestRedisUnavailable(t *testing.T) {
	addr := deadAddr(t)
	if _, err := redis.New(t.Context(), redis.Options{URL: "redis://" + addr}); !errors.Is(err, ratelimit.ErrUnavailable) {
		t.Fatalf("New on a dead Redis: %v, want ErrUnavailable", err)
	}
	if _, err := redis.New(t.Context(), redis.Options{URL: "http://x"}); err == nil {
		t.Fatal("New accepted a non-redis URL")
	}
	lim := ratelimit.Limit{Rate: 1, Burst: 1}
	k := ratelimit.Key{ToolID: "t"}
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deny := redis.NewFromClient(c, redis.Options{})
	r, err := deny.Take(t.Context(), k, lim)
	if !errors.Is(err, ratelimit.ErrUnavailable) || r.Allowed {
		t.Fatalf("deny: %+v %v, want ErrUnavailable", r, err)
	}
	if deny.Stats().Unavailable != 1 {
		t.Fatalf("deny Stats %+v", deny.Stats())
	}
	allow := redis.NewFromClient(c, redis.Options{AllowUnavailable: true})
	r, _, err = allow.TakeAll(t.Context(), []ratelimit.Bucket{{Key: k, Limit: lim, Rule: "ratelimits[0]"}})
	if err != nil || !r.Allowed {
		t.Fatalf("allow: %+v %v, want allowed", r, err)
	}
	if allow.Stats().Unavailable != 1 {
		t.Fatalf("allow Stats %+v", allow.Stats())
	}
}

// TestRedisFastRate: at the fastest accepted rate the debt keeps its
// precision, so burst 2 still refuses the third immediate take.
func TestRedisFastRate(t *testing.T) {
	l := newLimiter(t, redis.Options{})
	k := ratelimit.Key{ToolID: "fast"}
	lim := ratelimit.Limit{Rate: 1, Burst: ratelimit.MaxBurst}
	for range 3 {
		if r, err := l.Take(t.Context(), k, lim); err != nil || !r.Allowed {
			t.Fatalf("%+v %v", r, err)
		}
	}
	r, _ := l.Take(t.Context(), k, lim)
	if r.Remaining != ratelimit.MaxBurst-4 {
		t.Fatalf("Remaining %d, want %d", r.Remaining, ratelimit.MaxBurst-4)
	}
}
