package policy

import (
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	"github.com/toolgate/toolgate/internal/netclass"
)

// CEL function names of the url and net libraries (issue 17 point 5).
const (
	fnURLHost   = "url.host"
	fnURLScheme = "url.scheme"
	fnURLPort   = "url.port"
	fnURLPath   = "url.path"
	fnNetIP     = "net.ip"
	fnNetCIDR   = "net.cidr"
)

// The CEL types of net.ip and net.cidr values.
var (
	ipCELType   = cel.OpaqueType("net.IP")
	cidrCELType = cel.OpaqueType("net.CIDR")
)

// ipVal is a net.ip(s) value: an IP address (zone dropped).
type ipVal struct{ a netip.Addr }

func (v ipVal) ConvertToNative(t reflect.Type) (any, error) {
	switch t {
	case reflect.TypeOf(netip.Addr{}):
		return v.a, nil
	case reflect.TypeOf(""):
		return v.a.String(), nil
	}
	return nil, fmt.Errorf("net.IP: no conversion to %v", t)
}

func (v ipVal) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.StringType:
		return types.String(v.a.String())
	case ipCELType:
		return v
	case types.TypeType:
		return ipCELType
	}
	return types.NewErr("net.IP: no conversion to %s", t.TypeName())
}

func (v ipVal) Equal(o ref.Val) ref.Val {
	w, ok := o.(ipVal)
	if !ok {
		return types.False
	}
	return types.Bool(v.a == w.a)
}

func (v ipVal) Type() ref.Type { return ipCELType }
func (v ipVal) Value() any     { return v.a }

// cidrVal is a net.cidr(s) value: a masked prefix.
type cidrVal struct{ p netip.Prefix }

func (v cidrVal) ConvertToNative(t reflect.Type) (any, error) {
	switch t {
	case reflect.TypeOf(netip.Prefix{}):
		return v.p, nil
	case reflect.TypeOf(""):
		return v.p.String(), nil
	}
	return nil, fmt.Errorf("net.CIDR: no conversion to %v", t)
}

func (v cidrVal) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.StringType:
		return types.String(v.p.String())
	case cidrCELType:
		return v
	case types.TypeType:
		return cidrCELType
	}
	return types.NewErr("net.CIDR: no conversion to %s", t.TypeName())
}

func (v cidrVal) Equal(o ref.Val) ref.Val {
	w, ok := o.(cidrVal)
	if !ok {
		return types.False
	}
	return types.Bool(v.p == w.p)
}

// cidrRuntimeType is cidrVal's runtime type: net.CIDR with the container
// trait, so that the standard `in` dispatches to Contains.
var cidrRuntimeType = types.NewObjectType("net.CIDR", traits.ContainerType)

func (v cidrVal) Type() ref.Type { return cidrRuntimeType }

// Contains implements traits.Container: ip in cidr (an IPv4-mapped IPv6
// address matches an IPv4 prefix).
func (v cidrVal) Contains(o ref.Val) ref.Val {
	ip, ok := o.(ipVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(o)
	}
	return types.Bool(netclass.Contains(v.p, ip.a))
}
func (v cidrVal) Value() any { return v.p }

// ParseIP is net.ip's parser: a dotted-quad IPv4 address or an IPv6
// address (RFC 4291 text, an IPv4-mapped tail allowed, a %zone dropped).
// It refuses the forms some URL fetchers accept as IPv4 but that are
// ambiguous (octal 0177.0.0.1, decimal 2130706433, hex 0x7f.1, shortened
// 127.1), brackets and ports, so that a rule errs (and fails closed)
// rather than reads a different address than the fetcher. Errors name the
// input, quoted and cut to 64 bytes.
func ParseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("net.ip: %s is not an IP address", quoteShort(s))
	}
	return a.WithZone(""), nil
}

// ParseCIDR is net.cidr's parser: an address, "/" and a prefix length
// ("10.0.0.0/8", "fd00::/8"); host bits are masked off. Errors name the
// input, quoted and cut to 64 bytes.
func ParseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("net.cidr: %s is not a CIDR prefix (such as \"10.0.0.0/8\")", quoteShort(s))
	}
	return p.Masked(), nil
}

// ParseURL is the url functions' parser: an absolute URL with a scheme
// and a host (net/url, RFC 3986), at most 8 KiB. It returns the lower-cased
// scheme, the host (lower-cased, without brackets or a trailing dot), the
// port (the explicit one, else 80 for http and ws, 443 for https and wss,
// 21 for ftp, else -1) and the path ("" for none). Errors: not absolute,
// no host, a bad port, userinfo-only tricks the parser refuses.
func ParseURL(s string) (scheme, host string, port int, path string, err error) {
	if len(s) > 8<<10 {
		return "", "", 0, "", fmt.Errorf("url: the URL is longer than 8 KiB")
	}
	u, perr := url.Parse(s)
	if perr != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "" {
		return "", "", 0, "", fmt.Errorf("url: %s is not an absolute URL with a host", quoteShort(s))
	}
	scheme = strings.ToLower(u.Scheme)
	host = strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return "", "", 0, "", fmt.Errorf("url: %s has no host", quoteShort(s))
	}
	port = -1
	if ps := u.Port(); ps != "" {
		n, cerr := strconv.Atoi(ps)
		if cerr != nil || n < 0 || n > 65535 {
			return "", "", 0, "", fmt.Errorf("url: %s has a bad port", quoteShort(s))
		}
		port = n
	} else {
		switch scheme {
		case "http", "ws":
			port = 80
		case "https", "wss":
			port = 443
		case "ftp":
			port = 21
		}
	}
	return scheme, host, port, u.EscapedPath(), nil
}

func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strconv.Quote(s)
}

// netLib declares the url and net functions:
//
//	url.host(s) string, url.scheme(s) string, url.port(s) int, url.path(s) string
//	net.ip(s) net.IP, net.cidr(s) net.CIDR
//	ip in cidr, cidr.contains(ip)            (IPv4-mapped forms match IPv4 prefixes)
//	string(ip), string(cidr), ip == ip, cidr == cidr
//	ip.isLoopback(), isLinkLocal(), isPrivate(), isCGNAT(), isUnspecified(),
//	ip.isMulticast(), isPublic(), ip.class()  (class: the egress rule name, or "public")
//
// A malformed argument is an evaluation error (the rule fails closed); a
// malformed constant argument is a load issue (netChecks).
func netLib() cel.EnvOption { return cel.Lib(netLibrary{}) }

type netLibrary struct{}

func stringFn(name, id string, result *cel.Type, f func(scheme, host string, port int, path string) ref.Val) cel.EnvOption {
	return cel.Function(name, cel.Overload(id, []*cel.Type{cel.StringType}, result, cel.UnaryBinding(func(v ref.Val) ref.Val {
		s, ok := v.(types.String)
		if !ok {
			return types.MaybeNoSuchOverloadErr(v)
		}
		scheme, host, port, path, err := ParseURL(string(s))
		if err != nil {
			return types.NewErr("%s: %s", name, err.Error())
		}
		return f(scheme, host, port, path)
	})))
}

// CompileOptions implements cel.Library.
func (netLibrary) CompileOptions() []cel.EnvOption {
	pred := func(name string, f func(netip.Addr) bool) cel.EnvOption {
		return cel.Function(name, cel.MemberOverload("net_ip_"+name, []*cel.Type{ipCELType}, cel.BoolType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				ip, ok := v.(ipVal)
				if !ok {
					return types.MaybeNoSuchOverloadErr(v)
				}
				return types.Bool(f(ip.a))
			})))
	}
	is := func(rule string) func(netip.Addr) bool {
		return func(a netip.Addr) bool { return netclass.Classify(a) == rule }
	}
	contains := func(c, i ref.Val) ref.Val {
		cv, ok1 := c.(cidrVal)
		iv, ok2 := i.(ipVal)
		if !ok1 || !ok2 {
			return types.NoSuchOverloadErr()
		}
		return types.Bool(netclass.Contains(cv.p, iv.a))
	}
	return []cel.EnvOption{
		stringFn(fnURLHost, "url_host_string", cel.StringType, func(_, host string, _ int, _ string) ref.Val { return types.String(host) }),
		stringFn(fnURLScheme, "url_scheme_string", cel.StringType, func(scheme, _ string, _ int, _ string) ref.Val { return types.String(scheme) }),
		stringFn(fnURLPort, "url_port_string", cel.IntType, func(_, _ string, port int, _ string) ref.Val { return types.Int(port) }),
		stringFn(fnURLPath, "url_path_string", cel.StringType, func(_, _ string, _ int, path string) ref.Val { return types.String(path) }),
		cel.Function(fnNetIP, cel.Overload("net_ip_string", []*cel.Type{cel.StringType}, ipCELType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				s, ok := v.(types.String)
				if !ok {
					return types.MaybeNoSuchOverloadErr(v)
				}
				a, err := ParseIP(string(s))
				if err != nil {
					return types.NewErr("%s", err.Error())
				}
				return ipVal{a}
			}))),
		cel.Function(fnNetCIDR, cel.Overload("net_cidr_string", []*cel.Type{cel.StringType}, cidrCELType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				s, ok := v.(types.String)
				if !ok {
					return types.MaybeNoSuchOverloadErr(v)
				}
				p, err := ParseCIDR(string(s))
				if err != nil {
					return types.NewErr("%s", err.Error())
				}
				return cidrVal{p}
			}))),
		// The standard library's one binding of `in` calls Contains on a
		// right-hand side whose type has the container trait: cidrVal.
		cel.Function(operators.In, cel.Overload("in_net_ip_net_cidr", []*cel.Type{ipCELType, cidrCELType}, cel.BoolType)),
		cel.Function("contains", cel.MemberOverload("net_cidr_contains_net_ip", []*cel.Type{cidrCELType, ipCELType}, cel.BoolType,
			cel.BinaryBinding(contains))),
		cel.Function("string",
			cel.Overload("net_ip_to_string", []*cel.Type{ipCELType}, cel.StringType,
				cel.UnaryBinding(func(v ref.Val) ref.Val { return v.ConvertToType(types.StringType) })),
			cel.Overload("net_cidr_to_string", []*cel.Type{cidrCELType}, cel.StringType,
				cel.UnaryBinding(func(v ref.Val) ref.Val { return v.ConvertToType(types.StringType) }))),
		pred("isLoopback", is(netclass.Loopback)),
		pred("isLinkLocal", is(netclass.LinkLocal)),
		pred("isPrivate", is(netclass.Private)),
		pred("isCGNAT", is(netclass.CGNAT)),
		pred("isUnspecified", is(netclass.Unspecified)),
		pred("isMulticast", is(netclass.Multicast)),
		pred("isPublic", func(a netip.Addr) bool { return netclass.Classify(a) == "" }),
		cel.Function("class", cel.MemberOverload("net_ip_class", []*cel.Type{ipCELType}, cel.StringType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				ip, ok := v.(ipVal)
				if !ok {
					return types.MaybeNoSuchOverloadErr(v)
				}
				if c := netclass.Classify(ip.a); c != "" {
					return types.String(c)
				}
				return types.String("public")
			}))),
	}
}

// ProgramOptions implements cel.Library.
func (netLibrary) ProgramOptions() []cel.ProgramOption { return nil }

// netChecks reports the constant arguments of net.ip, net.cidr and the url
// functions that can never parse: such a condition would err on every
// call, so it is a load issue at its location.
func netChecks(a *cel.Ast) (issues []finding) {
	info := a.NativeRep().SourceInfo()
	ast.PostOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.CallKind {
			return
		}
		c := e.AsCall()
		args := c.Args()
		if len(args) != 1 || args[0].Kind() != ast.LiteralKind {
			return
		}
		s, ok := args[0].AsLiteral().(types.String)
		if !ok {
			return
		}
		var err error
		switch c.FunctionName() {
		case fnNetIP:
			_, err = ParseIP(string(s))
		case fnNetCIDR:
			_, err = ParseCIDR(string(s))
		case fnURLHost, fnURLScheme, fnURLPort, fnURLPath:
			_, _, _, _, err = ParseURL(string(s))
			if err != nil {
				err = fmt.Errorf("%s: %s", c.FunctionName(), err.Error())
			}
		default:
			return
		}
		if err != nil {
			loc := info.GetStartLocation(args[0].ID())
			issues = append(issues, finding{line: loc.Line(), col: loc.Column(), msg: err.Error()})
		}
	}))
	return issues
}
