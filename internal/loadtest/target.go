package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/internal/auth"
)

// startTarget starts the gateways of one toolgate target: n replicas of
// toolgate serve with store st ("sqlite": n must be 1; "postgres": one
// fresh schema in opts.Postgres shared by the n replicas) and sessions
// mode, one API key for all, each replica with its own signing key (its
// own receipt chain) and, with opts.Redis, one Redis key prefix for all.
// stop stops the gateways and drops the schema; it is valid (and must be
// called) also when err is not nil.
func startTarget(ctx context.Context, opts Options, dir, echoURL, st, mode string, n int) (t target, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	key, err := auth.NewKey()
	if err != nil {
		return t, stop, err
	}
	suffix, err := randomSuffix()
	if err != nil {
		return t, stop, err
	}
	var be backend
	if opts.Redis != "" {
		be.redis, be.prefix = opts.Redis, "toolgate-load:"+suffix+":"
	}
	switch st {
	case "sqlite":
		if n != 1 {
			return t, stop, errors.New("sqlite serves one replica only")
		}
	case "postgres":
		dsn, drop, err := newSchema(ctx, opts.Postgres, "toolgate_load_"+suffix)
		if err != nil {
			return t, stop, err
		}
		stops = append(stops, drop)
		be.postgres = dsn
	default:
		return t, stop, fmt.Errorf("store %q: want sqlite or postgres", st)
	}
	t = target{name: "toolgate", sessions: mode, store: st, key: key}
	for range n {
		g, err := startGateway(ctx, opts.Toolgate, dir, echoURL, mode, key, be)
		if err != nil {
			return t, stop, err
		}
		stops = append(stops, g.stop)
		t.urls = append(t.urls, g.url)
		if g.pid != 0 {
			t.pids = append(t.pids, g.pid)
		}
	}
	return t, stop, nil
}

// randomSuffix is 12 random hex digits.
func randomSuffix() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// newSchema creates schema in the PostgreSQL database dsn and returns a DSN
// whose search_path is it, and a function that drops it (with everything
// in it).
func newSchema(ctx context.Context, dsn, schema string) (string, func(), error) {
	if dsn == "" {
		return "", nil, errors.New("the postgres store needs --postgres DSN")
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", nil, fmt.Errorf("--postgres %q: want a postgres:// URL", dsn)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return "", nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(cctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("creating schema %s: %w", schema, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}
