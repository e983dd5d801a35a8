// Package egress is toolgate's SSRF guard for the gateway's own outbound
// HTTP requests (to Streamable HTTP upstreams, webhooks and HTTP tools):
// OpenWOP RFC 0076 safe-fetch (resolve → check the address dialed →
// connect).
//
// A guarded transport checks, at dial time in net.Dialer.Control, the
// address actually being connected to, so a DNS answer that changes between
// a check and the dial (rebinding) cannot slip through: the address refused
// is the one the socket would reach. It refuses the special-purpose classes
// of internal/netclass (loopback, link-local, private, CGNAT, unspecified,
// multicast, broadcast, reserved, and IPv6 forms embedding any of them)
// unless Policy.AllowCIDRs contains the address. The host allow-list is
// checked for every request the transport sends, including each redirect
// hop; a client from NewClient also re-checks each hop before following it
// and limits the number of redirects. No proxy is taken from the
// environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY are ignored); only
// Policy.Proxy is used.
//
// A refused request fails with an error chain holding a *DeniedError
// (errors.As) that names the rule and the host, never more; Error turns it
// into errcode egress_denied with details {rule, host}.
//
// Everything here is safe for concurrent use; a Policy is read, never
// modified.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/netclass"
)

// DefaultMaxRedirects is the redirect limit of a Policy whose MaxRedirects
// is 0.
const DefaultMaxRedirects = 3

// Rule names of refusals that are not an address class (those are the
// netclass constants: "loopback", "link-local", "private", "cgnat",
// "unspecified", "multicast", "broadcast", "reserved").
const (
	RuleHostNotAllowed = "host-not-allowed" // the host is not in Policy.AllowHosts
	RuleRedirectLimit  = "redirect-limit"   // more redirects than Policy.MaxRedirects (or any, when it is -1)
	RuleBadAddress     = "bad-address"      // the dialed address could not be parsed (never expected)
)

// Policy is the egress policy of one destination (a server, a webhook, an
// HTTP tool). The zero Policy guards every request with the address rules,
// allows any host, follows up to 3 redirects and uses no proxy.
type Policy struct {
	// AllowHosts are host globs: "api.example.com" matches that host
	// exactly, "*.example.com" any name below example.com (not the apex),
	// "*" any host; case-insensitive, a trailing dot ignored; IP literals
	// match as written ("127.0.0.1", "::1" without brackets). Empty means
	// any host. A host that matches still has its dialed address checked.
	AllowHosts []string
	// AllowCIDRs are addresses allowed even if they belong to a refused
	// class. An IPv4 prefix also allows the IPv6 forms embedding an
	// address in it (::ffff:127.0.0.1 for 127.0.0.0/8).
	AllowCIDRs []netip.Prefix
	// MaxRedirects limits redirects per request: 0 means
	// DefaultMaxRedirects, a negative value means none is followed (a
	// redirect is refused with rule redirect-limit).
	MaxRedirects int
	// Proxy is the URL of the proxy every request goes through
	// (http, https or socks5); "" means none. Never read from the
	// environment. The proxy itself is dialed without the address rules
	// (it is the operator's own choice, often on loopback or a private
	// network); the host allow-list still applies to each request's host,
	// and the proxy is trusted to reach only that host.
	Proxy string
}

// Redirects is the effective redirect limit of p: DefaultMaxRedirects for 0,
// 0 for a negative value.
func (p Policy) Redirects() int {
	switch {
	case p.MaxRedirects == 0:
		return DefaultMaxRedirects
	case p.MaxRedirects < 0:
		return 0
	}
	return p.MaxRedirects
}

// Validate reports the first problem of p: a host glob with '*' other than
// a whole leading label ("*.example.com") or "*", an empty glob, or a Proxy
// that is not an absolute http, https or socks5 URL. Errors are
// errcode invalid_config.
func (p Policy) Validate() error {
	for _, h := range p.AllowHosts {
		if err := ValidHostGlob(h); err != nil {
			return err
		}
	}
	if p.Proxy != "" {
		if _, err := proxyURL(p.Proxy); err != nil {
			return err
		}
	}
	return nil
}

// ValidHostGlob reports whether g is a valid AllowHosts entry; the error
// is errcode invalid_config naming the problem.
func ValidHostGlob(g string) error {
	switch {
	case g == "":
		return errcode.New(errcode.InvalidConfig, "egress host glob is empty")
	case g == "*":
		return nil
	case strings.ContainsAny(g, "/@ \t?[]"):
		return errcode.Errorf(errcode.InvalidConfig, "egress host glob %q: want a host name, an IP address or *.domain", g)
	}
	rest := strings.TrimPrefix(g, "*.")
	if strings.Contains(rest, "*") || rest == "" {
		return errcode.Errorf(errcode.InvalidConfig, "egress host glob %q: '*' is allowed only as the whole first label (*.example.com) or alone", g)
	}
	return nil
}

func proxyURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5") {
		return nil, errcode.Errorf(errcode.InvalidConfig, "egress proxy %q: want an absolute http, https or socks5 URL", s)
	}
	return u, nil
}

// HostAllowed reports whether host (a name or IP literal, without port or
// brackets) matches p.AllowHosts (always, when it is empty).
func (p Policy) HostAllowed(host string) bool {
	if len(p.AllowHosts) == 0 {
		return true
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	for _, g := range p.AllowHosts {
		g = strings.TrimSuffix(strings.ToLower(g), ".")
		switch {
		case g == "*":
			return true
		case strings.HasPrefix(g, "*."):
			if strings.HasSuffix(h, g[1:]) && len(h) > len(g)-1 {
				return true
			}
		case g == h:
			return true
		}
	}
	return false
}

// AddrAllowed returns "" if a may be dialed under p, else the rule that
// refuses it (a netclass rule name).
func (p Policy) AddrAllowed(a netip.Addr) string {
	for _, c := range p.AllowCIDRs {
		if netclass.Contains(c, a) {
			return ""
		}
	}
	return netclass.Classify(a)
}

// DeniedError is a request refused by the guard. Rule names the rule
// (a netclass rule, RuleHostNotAllowed, RuleRedirectLimit); Host is the
// request's host (name or IP literal, without port); Addr is the address
// refused at dial time (invalid for host and redirect refusals). Error
// and the errcode form carry only Rule and Host, never Addr: log Addr
// deliberately if at all.
type DeniedError struct {
	Rule string
	Host string
	Addr netip.Addr
}

// Error implements error: "egress denied: <rule> (host <host>)".
func (e *DeniedError) Error() string {
	return fmt.Sprintf("egress denied: %s (host %s)", e.Rule, e.Host)
}

// Errcode is e as errcode egress_denied with details {rule, host}.
func (e *DeniedError) Errcode() *errcode.Error {
	return errcode.New(errcode.EgressDenied, e.Error()).WithDetails(map[string]any{"rule": e.Rule, "host": e.Host})
}

// Error returns errcode egress_denied (details {rule, host}) if err's chain
// holds a *DeniedError, else nil.
func Error(err error) *errcode.Error {
	var d *DeniedError
	if errors.As(err, &d) {
		return d.Errcode()
	}
	return nil
}

// Option configures NewTransport and NewClient.
type Option func(*guard)

// WithResolver makes the guard resolve names with r instead of
// net.DefaultResolver (tests: a resolver whose Dial answers from an
// in-process DNS server, so names resolve to any address without leaving
// loopback). The dialed address is checked whatever r answers.
func WithResolver(r *net.Resolver) Option { return func(g *guard) { g.resolver = r } }

// WithDialTimeout sets the TCP connect timeout (default 30s).
func WithDialTimeout(d time.Duration) Option { return func(g *guard) { g.timeout = d } }

type guard struct {
	p        Policy
	resolver *net.Resolver
	timeout  time.Duration
	proxy    *url.URL // nil: none
}

func newGuard(p Policy, opts []Option) *guard {
	g := &guard{p: p, timeout: 30 * time.Second}
	for _, o := range opts {
		o(g)
	}
	if p.Proxy != "" {
		// An invalid proxy is refused by Validate at config load; here it
		// fails every request rather than going direct.
		u, err := proxyURL(p.Proxy)
		if err != nil {
			g.proxy = &url.URL{Scheme: "invalid"}
		} else {
			g.proxy = u
		}
	}
	return g
}

// proxyFor is the transport's Proxy func: it refuses a request whose
// host is not allowed (every request, every redirect hop) and returns the
// configured proxy, never one from the environment.
func (g *guard) proxyFor(r *http.Request) (*url.URL, error) {
	host := r.URL.Hostname()
	if !g.p.HostAllowed(host) {
		return nil, &DeniedError{Rule: RuleHostNotAllowed, Host: host}
	}
	if g.proxy != nil && g.proxy.Scheme == "invalid" {
		return nil, errcode.New(errcode.InvalidConfig, "egress proxy is not a valid URL")
	}
	return g.proxy, nil
}

// dial connects to addr ("host:port") checking, in Control, each address
// the dialer actually connects to.
func (g *guard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	d := net.Dialer{Timeout: g.timeout, KeepAlive: 30 * time.Second, Resolver: g.resolver}
	if g.proxy != nil && addr == proxyAddr(g.proxy) {
		return d.DialContext(ctx, network, addr)
	}
	if !g.p.HostAllowed(host) {
		return nil, &DeniedError{Rule: RuleHostNotAllowed, Host: host}
	}
	d.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &DeniedError{Rule: RuleBadAddress, Host: host}
		}
		if rule := g.p.AddrAllowed(ap.Addr()); rule != "" {
			return &DeniedError{Rule: rule, Host: host, Addr: ap.Addr()}
		}
		return nil
	}
	return d.DialContext(ctx, network, addr)
}

// proxyAddr is the host:port the transport dials for proxy u.
func proxyAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "socks5":
			port = "1080"
		default:
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// NewTransport returns an HTTP transport guarded by p: every connection it
// opens is checked at dial time (net.Dialer.Control) against p's address
// rules, every request's host against p.AllowHosts, and it uses p.Proxy
// (never the environment's). Pool settings are http.DefaultTransport's;
// callers may change them on the returned value before first use. A
// transport does not follow redirects: use NewClient for the redirect
// limit.
func NewTransport(p Policy, opts ...Option) *http.Transport {
	return newGuard(p, opts).transport()
}

func (g *guard) transport() *http.Transport {
	return &http.Transport{
		Proxy:                 g.proxyFor,
		DialContext:           g.dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// NewClient returns an HTTP client on NewTransport(p, opts...) whose
// CheckRedirect refuses a redirect beyond p.Redirects() (rule
// redirect-limit) and one to a host not in p.AllowHosts (rule
// host-not-allowed) before following it; the hop's dialed address is then
// checked by the transport. It has no overall timeout: use the request
// context.
func NewClient(p Policy, opts ...Option) *http.Client {
	g := newGuard(p, opts)
	return &http.Client{Transport: g.transport(), CheckRedirect: CheckRedirect(p)}
}

// CheckRedirect is the http.Client.CheckRedirect of p: it refuses the
// redirect to req when the request chain via already holds p.Redirects()
// redirects, or when req's host is not allowed, with a *DeniedError.
func CheckRedirect(p Policy) func(req *http.Request, via []*http.Request) error {
	limit := p.Redirects()
	return func(req *http.Request, via []*http.Request) error {
		host := req.URL.Hostname()
		if len(via) > limit {
			return &DeniedError{Rule: RuleRedirectLimit, Host: host}
		}
		if !p.HostAllowed(host) {
			return &DeniedError{Rule: RuleHostNotAllowed, Host: host}
		}
		return nil
	}
}
