package auth

import (
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reason is why a request was refused authentication: the label value of
// the toolgate_auth_refused_total counter and the reason of its log line. A
// closed set (the Reason* constants).
type Reason string

// The reasons of a refusal.
const (
	ReasonNoMethod        Reason = "no_method"            // no API key or JWT is configured
	ReasonNoCredentials   Reason = "no_credentials"       // no Authorization or X-API-Key header
	ReasonMultiple        Reason = "multiple_credentials" // more than one credential header
	ReasonScheme          Reason = "unsupported_scheme"   // Authorization is not Bearer
	ReasonMalformed       Reason = "malformed"            // empty, oversized or malformed credential or JWT
	ReasonUnknownAPIKey   Reason = "unknown_api_key"      // a key no auth.api_keys entry has
	ReasonExpired         Reason = "expired"              // JWT exp passed or missing
	ReasonNotYetValid     Reason = "not_yet_valid"        // JWT nbf in the future
	ReasonAudience        Reason = "audience"             // JWT aud is not auth.jwt.audience
	ReasonIssuer          Reason = "issuer"               // JWT iss is not auth.jwt.issuer
	ReasonAlgorithm       Reason = "algorithm"            // JWT alg not allowed (none, HMAC, …)
	ReasonUnknownKey      Reason = "unknown_kid"          // JWT kid not in the issuer's JWKS
	ReasonSignature       Reason = "signature"            // JWT signature does not verify
	ReasonKeysUnavailable Reason = "keys_unavailable"     // the issuer's JWKS cannot be fetched
	ReasonClaims          Reason = "claims"               // JWT sub, tenant or scopes claim missing or mistyped
	ReasonInvalid         Reason = "invalid"              // any other rejection
)

// Reasons lists every Reason, in the order /metrics prints them.
var Reasons = []Reason{ReasonNoCredentials, ReasonMultiple, ReasonScheme, ReasonMalformed, ReasonUnknownAPIKey,
	ReasonExpired, ReasonNotYetValid, ReasonAudience, ReasonIssuer, ReasonAlgorithm, ReasonUnknownKey,
	ReasonSignature, ReasonKeysUnavailable, ReasonClaims, ReasonNoMethod, ReasonInvalid}

// Log rate of refusals: a burst of refusalBurst lines, then one per
// refusalEvery; the lines left out are counted in the next one's
// "suppressed".
const (
	refusalBurst = 10
	refusalEvery = time.Second
)

// Refusals counts refused requests by Reason and logs each, rate limited
// (a burst of 10 lines, then one per second; a line reports how many were
// left out before it as "suppressed"). A line has the reason, the
// message, the method, path and remote address and, for a JWT, its kid,
// alg and iss as presented (clipped, never verified); never the credential.
// A request without credentials is logged at debug level (clients probe
// so), every other refusal at warn. Safe for concurrent use.
type Refusals struct {
	log    *slog.Logger
	now    func() time.Time
	counts []atomic.Int64 // by reasonIndex

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int64
}

// reasonIndex maps a Reason to its counter.
var reasonIndex = func() map[Reason]int {
	m := map[Reason]int{}
	for i, r := range Reasons {
		m[r] = i
	}
	return m
}()

// NewRefusals returns a Refusals logging to log (nil: nowhere).
func NewRefusals(log *slog.Logger) *Refusals {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Refusals{log: log, now: time.Now, tokens: refusalBurst, counts: make([]atomic.Int64, len(Reasons))}
}

// Count returns how many refusals of reason were recorded.
func (f *Refusals) Count(reason Reason) int64 {
	i, ok := reasonIndex[reason]
	if !ok {
		return 0
	}
	return f.counts[i].Load()
}

var descRefused = prometheus.NewDesc("toolgate_auth_refused_total", "Requests refused authentication, by reason.", []string{"reason"}, nil)

// Collector returns a Prometheus collector of the counter
// toolgate_auth_refused_total{reason} (every Reason, read at each scrape).
// Safe for concurrent use.
func (f *Refusals) Collector() prometheus.Collector { return refusalCollector{f} }

type refusalCollector struct{ f *Refusals }

func (c refusalCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descRefused }

func (c refusalCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range Reasons {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(c.f.Count(r)), string(r))
	}
}

// record counts and logs the refusal err of r.
func (f *Refusals) record(r *http.Request, err error) {
	reason, presented := reasonOf(err)
	f.counts[reasonIndex[reason]].Add(1)
	level := slog.LevelWarn
	if reason == ReasonNoCredentials {
		level = slog.LevelDebug
	}
	if !f.log.Enabled(r.Context(), level) {
		return
	}
	suppressed, ok := f.allow()
	if !ok {
		return
	}
	msg := "authentication refused"
	if e := err.Error(); e != "" {
		msg = e
	}
	attrs := []any{"reason", string(reason), "err", msg, "method", r.Method, "path", clipLog(r.URL.Path), "remote", r.RemoteAddr}
	if presented {
		if h := r.Header.Get("Authorization"); h != "" {
			if scheme, tok, _ := strings.Cut(h, " "); strings.EqualFold(scheme, "Bearer") {
				if kid, alg, iss, ok := tokenInfo(strings.TrimSpace(tok)); ok {
					attrs = append(attrs, "kid", kid, "alg", alg, "iss", iss)
				}
			}
		}
	}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	f.log.Log(r.Context(), level, "refused credentials", attrs...)
}

// allow takes a log token; it returns how many lines were left out since
// the last one taken.
func (f *Refusals) allow() (suppressed int64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if !f.last.IsZero() {
		f.tokens = min(refusalBurst, f.tokens+float64(now.Sub(f.last))/float64(refusalEvery))
	}
	f.last = now
	if f.tokens < 1 {
		f.suppressed++
		return 0, false
	}
	f.tokens--
	s := f.suppressed
	f.suppressed = 0
	return s, true
}

// maxLogField bounds a presented value (kid, alg, iss, path) in a log line.
const maxLogField = 96

// clipLog keeps printable ASCII of s, at most maxLogField bytes.
func clipLog(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < maxLogField; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
		} else {
			b.WriteByte('?')
		}
	}
	if len(s) > maxLogField {
		b.WriteString("…")
	}
	return b.String()
}

// tokenInfo reads the kid and alg of a compact JWS's header and the iss of
// its payload, unverified, for a log line (clipped printable ASCII). ok is
// false when token is not a JWT with a JSON object header.
func tokenInfo(token string) (kid, alg, iss string, ok bool) {
	if len(token) > MaxCredentialLen || !looksLikeJWT(token) {
		return "", "", "", false
	}
	parts := strings.SplitN(token, ".", 3)
	var h struct {
		Kid any `json:"kid"`
		Alg any `json:"alg"`
	}
	hb, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil || json.Unmarshal(hb, &h) != nil {
		return "", "", "", false
	}
	var c struct {
		Iss any `json:"iss"`
	}
	if pb, err := base64.RawURLEncoding.DecodeString(parts[1]); err == nil {
		_ = json.Unmarshal(pb, &c)
	}
	str := func(v any) string {
		if s, ok := v.(string); ok {
			return clipLog(s)
		}
		if v == nil {
			return ""
		}
		return "(not a string)"
	}
	return str(h.Kid), str(h.Alg), str(c.Iss), true
}
