package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// DefaultJWKSRefreshInterval is the least time between two fetches of the
// issuer's JWKS when config auth.jwt.jwks_refresh_interval is empty.
const DefaultJWKSRefreshInterval = 60 * time.Second

// maxJWKSBytes bounds a JWKS response body.
const maxJWKSBytes = 1 << 20

// failedFetchRetry is the least time between fetch attempts after a failed
// one, when it is shorter than the refresh interval: an issuer that was
// down is asked again soon, but never more than once per this.
const failedFetchRetry = 5 * time.Second

// Errors of keySet.VerifySignature; go-oidc reports them as text, which
// jwtFailure matches.
var (
	errUnknownKey = errors.New("unknown signing key: the token's kid is not in the issuer's key set")
	errSignature  = errors.New("signature does not verify")
)

// keySet is the issuer's JWKS (an oidc.KeySet): the keys are fetched on the
// first token and again only when a token names a kid the cached set lacks,
// at most once per interval (a forged kid cannot make toolgate hammer the
// issuer), so a newly rotated key is accepted after one refetch. A failed
// fetch keeps the cached keys. Safe for concurrent use; concurrent
// refetches share one request.
type keySet struct {
	url      string
	client   *http.Client
	interval time.Duration
	now      func() time.Time

	mu        sync.Mutex
	keys      []jose.JSONWebKey
	fetched   bool          // a fetch succeeded at least once
	lastTry   time.Time     // start of the last fetch attempt
	lastErr   error         // the last attempt's error (nil if it succeeded)
	inflight  chan struct{} // closed when the running fetch ends; nil when none runs
	fetchHits atomic.Int64  // fetch attempts, for tests
}

func newKeySet(url string, client *http.Client, interval time.Duration, now func() time.Time) *keySet {
	if interval <= 0 {
		interval = DefaultJWKSRefreshInterval
	}
	if now == nil {
		now = time.Now
	}
	return &keySet{url: url, client: client, interval: interval, now: now}
}

// VerifySignature implements oidc.KeySet: it returns the payload of the
// compact JWS raw once a key of the set verifies it.
func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSigned(raw, joseAlgs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %v", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("malformed jwt: want exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	k.mu.Lock()
	keys, fetched := k.keys, k.fetched
	k.mu.Unlock()
	if fetched {
		payload, known, ok := verifyWith(jws, keys, kid)
		if ok {
			return payload, nil
		}
		if known {
			// A key with this kid is cached and does not verify: the
			// signature is bad; a refetch would not change that.
			return nil, errSignature
		}
	}
	keys, err = k.refresh(ctx)
	if err != nil {
		return nil, err
	}
	payload, known, ok := verifyWith(jws, keys, kid)
	switch {
	case ok:
		return payload, nil
	case known || kid == "":
		return nil, errSignature
	}
	return nil, errUnknownKey
}

// verifyWith tries the keys whose kid is kid (every key when kid is empty).
// known reports whether a key had that kid.
func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) (payload []byte, known, ok bool) {
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		known = kid != ""
		if p, err := jws.Verify(&keys[i]); err == nil {
			return p, known, true
		}
	}
	return nil, known, false
}

// refresh returns the key set after fetching it anew if the last attempt is
// at least the interval old (failedFetchRetry after a failure, if
// shorter), else the cached set. A caller whose ctx ends stops waiting; the
// fetch itself goes on (bounded by the HTTP client's timeout).
func (k *keySet) refresh(ctx context.Context) ([]jose.JSONWebKey, error) {
	k.mu.Lock()
	if k.inflight == nil {
		wait := k.interval
		if k.lastErr != nil || !k.fetched {
			wait = min(wait, failedFetchRetry)
		}
		if !k.lastTry.IsZero() && k.now().Sub(k.lastTry) < wait {
			keys, fetched, lastErr := k.keys, k.fetched, k.lastErr
			k.mu.Unlock()
			if !fetched && lastErr != nil {
				return nil, fmt.Errorf("fetching keys: %w (next attempt within %s)", lastErr, wait)
			}
			return keys, nil
		}
		k.lastTry = k.now()
		done := make(chan struct{})
		k.inflight = done
		k.fetchHits.Add(1)
		go func() {
			keys, err := k.fetch()
			k.mu.Lock()
			k.lastErr = err
			if err == nil {
				k.keys, k.fetched = keys, true
			}
			k.inflight = nil
			k.mu.Unlock()
			close(done)
		}()
	}
	done := k.inflight
	k.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-done:
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lastErr != nil {
		return nil, fmt.Errorf("fetching keys: %w", k.lastErr)
	}
	return k.keys, nil
}

// fetch GETs the JWKS.
func (k *keySet) fetch() ([]jose.JSONWebKey, error) {
	ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the JWKS endpoint answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("the JWKS is larger than %d bytes", maxJWKSBytes)
	}
	return parseJWKS(body)
}

// jwksFetchTimeout bounds one JWKS fetch.
const jwksFetchTimeout = 10 * time.Second

// joseAlgs are signingAlgs for go-jose.
var joseAlgs = func() []jose.SignatureAlgorithm {
	out := make([]jose.SignatureAlgorithm, len(signingAlgs))
	for i, a := range signingAlgs {
		out[i] = jose.SignatureAlgorithm(a)
	}
	return out
}()

// parseJWKS decodes a JWKS document (RFC 7517 §5): {"keys": [JWK, …]}.
// Keys that cannot verify an accepted signature (a symmetric key, an
// unsupported key type or alg, a private key's public half aside) are
// skipped; a document that is not such an object is an error.
func parseJWKS(body []byte) ([]jose.JSONWebKey, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("the JWKS is not a JSON object with keys: %v", err)
	}
	if doc.Keys == nil {
		return nil, errors.New("the JWKS has no keys member")
	}
	accepted := map[string]bool{}
	for _, a := range signingAlgs {
		accepted[a] = true
	}
	var keys []jose.JSONWebKey
	for _, raw := range doc.Keys {
		var meta struct {
			Alg string `json:"alg"`
			Use string `json:"use"`
		}
		if json.Unmarshal(raw, &meta) != nil || (meta.Alg != "" && !accepted[meta.Alg]) || (meta.Use != "" && meta.Use != "sig") {
			continue
		}
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil || !k.Valid() {
			continue
		}
		if !k.IsPublic() {
			k = k.Public()
			if !k.Valid() {
				continue // a symmetric key has no public half
			}
		}
		keys = append(keys, k)
	}
	return keys, nil
}
