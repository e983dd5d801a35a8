package auth

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
)

// Challenge writes the 401 response for err, an error from Authenticate:
//
//	WWW-Authenticate: Bearer realm="<realm>"[, error="invalid_token", error_description="<message>"]
//	Content-Type: application/json
//
//	{"error":"unauthenticated","message":"<message>"}
//
// The error attributes are present only when a credential was presented and
// rejected (RFC 6750 §3.1). For an error that is not an Unauthenticated
// *errcode.Error the message is "authentication failed". Challenge must be
// called before anything else is written to w.
func (a *Authenticator) Challenge(w http.ResponseWriter, err error) {
	msg := "authentication failed"
	if e := errcode.As(err); e != nil && e.Code == errcode.Unauthenticated {
		msg = e.Message
	}
	ch := `Bearer realm="` + a.realm + `"`
	if errors.Is(err, presented{}) {
		ch += `, error="invalid_token", error_description="` + quotable(msg) + `"`
	}
	body, _ := json.Marshal(struct {
		Error   errcode.Code `json:"error"`
		Message string       `json:"message"`
	}{errcode.Unauthenticated, msg})
	h := w.Header()
	h.Set("WWW-Authenticate", ch)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(append(body, '\n'))
}

// quotable keeps only the characters RFC 6750 §3 allows in
// error_description, replacing others with '?'.
func quotable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '?'
		}
		return r
	}, s)
}

// Middleware authenticates each request: on success it calls next with the
// principal in the request context (PrincipalFrom); on failure it writes
// Challenge and does not call next. The handler is safe for concurrent use.
func (a *Authenticator) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Authenticate(r)
		if err != nil {
			a.Challenge(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

type principalKey struct{}

// WithPrincipal returns a copy of ctx carrying p.
func WithPrincipal(ctx context.Context, p policy.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal stored by WithPrincipal (or
// Middleware) and whether there was one.
func PrincipalFrom(ctx context.Context) (policy.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(policy.Principal)
	return p, ok
}
