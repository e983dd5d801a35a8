// Package netclass names the special-purpose address classes that toolgate's
// SSRF guard refuses (internal/egress) and that policy CEL helpers test
// (net.ip(s).is_private() ...): loopback, link-local, private, CGNAT,
// unspecified, multicast, broadcast and reserved, for IPv4 and IPv6, and for
// IPv4 addresses embedded in IPv6 (IPv4-mapped ::ffff:a.b.c.d,
// IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4
// 2002::/16).
//
// The ranges follow the IANA IPv4 and IPv6 Special-Purpose Address
// Registries (RFC 6890): RFC 1122 (0.0.0.0/8, 127.0.0.0/8), RFC 1918,
// RFC 3927 (169.254.0.0/16), RFC 4291 (::1, fe80::/10, ff00::/8, the
// IPv4-mapped and -compatible forms), RFC 4193 (fc00::/7), RFC 6598
// (100.64.0.0/10), RFC 6052 and RFC 8215 (NAT64), RFC 3056 (6to4).
//
// netclass is a leaf package (standard library only); everything in it is
// safe for concurrent use.
package netclass

import (
	"net/netip"
)

// Rule names of the address classes; each is the value of
// egress.DeniedError.Rule and of the "rule" detail of an egress_denied error.
const (
	Loopback    = "loopback"    // 127.0.0.0/8, ::1
	LinkLocal   = "link-local"  // 169.254.0.0/16 (cloud metadata lives here), fe80::/10
	Private     = "private"     // 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7
	CGNAT       = "cgnat"       // 100.64.0.0/10 (RFC 6598 shared address space)
	Unspecified = "unspecified" // 0.0.0.0/8 ("this network"; 0.0.0.0 reaches the local host), ::
	Multicast   = "multicast"   // 224.0.0.0/4, ff00::/8
	Broadcast   = "broadcast"   // 255.255.255.255
	Reserved    = "reserved"    // 240.0.0.0/4, 192.0.0.0/24, 198.18.0.0/15 (not globally reachable)
)

var v4 = []struct {
	p    netip.Prefix
	rule string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), Unspecified},
	{netip.MustParsePrefix("127.0.0.0/8"), Loopback},
	{netip.MustParsePrefix("169.254.0.0/16"), LinkLocal},
	{netip.MustParsePrefix("10.0.0.0/8"), Private},
	{netip.MustParsePrefix("172.16.0.0/12"), Private},
	{netip.MustParsePrefix("192.168.0.0/16"), Private},
	{netip.MustParsePrefix("100.64.0.0/10"), CGNAT},
	{netip.MustParsePrefix("224.0.0.0/4"), Multicast},
	{netip.MustParsePrefix("255.255.255.255/32"), Broadcast},
	{netip.MustParsePrefix("240.0.0.0/4"), Reserved},
	{netip.MustParsePrefix("192.0.0.0/24"), Reserved},
	{netip.MustParsePrefix("198.18.0.0/15"), Reserved},
}

var v6 = []struct {
	p    netip.Prefix
	rule string
}{
	{netip.MustParsePrefix("::/128"), Unspecified},
	{netip.MustParsePrefix("::1/128"), Loopback},
	{netip.MustParsePrefix("fe80::/10"), LinkLocal},
	{netip.MustParsePrefix("fc00::/7"), Private},
	{netip.MustParsePrefix("ff00::/8"), Multicast},
}

// Embedded returns the IPv4 address embedded in an IPv6 address a, and
// true, for the forms that carry one to an IPv4 destination: IPv4-mapped
// (::ffff:0:0/96), IPv4-compatible (::/96 other than :: and ::1), NAT64
// (64:ff9b::/96, and 64:ff9b:1::/48 whose last 32 bits carry it) and 6to4
// (2002::/16, bits 16-47). For any other address it returns a, false.
func Embedded(a netip.Addr) (netip.Addr, bool) {
	a = a.WithZone("")
	if !a.Is6() {
		return a, false
	}
	b := a.As16()
	last := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	switch {
	case a.Is4In6():
		return a.Unmap(), true
	case allZero(b[:12]) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return last, true
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && allZero(b[4:12]):
		return last, true
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0x00 && b[5] == 0x01:
		return last, true
	case b[0] == 0x20 && b[1] == 0x02:
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return a, false
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Classify returns the rule name of the special-purpose class a belongs
// to, "" for an address in none of them (a globally routable unicast
// address). An IPv6 address that embeds an IPv4 address (see Embedded)
// takes the class of the embedded address. An invalid (zero) Addr is
// Unspecified. Zones are ignored.
func Classify(a netip.Addr) string {
	if !a.IsValid() {
		return Unspecified
	}
	a = a.WithZone("")
	if e, ok := Embedded(a); ok {
		a = e
	}
	if a.Is4() {
		for _, r := range v4 {
			if r.p.Contains(a) {
				return r.rule
			}
		}
		return ""
	}
	for _, r := range v6 {
		if r.p.Contains(a) {
			return r.rule
		}
	}
	return ""
}

// Contains reports whether prefix p contains a, comparing an IPv4 prefix
// with the IPv4 address an IPv6 a embeds (see Embedded) as well, so that
// 127.0.0.0/8 contains ::ffff:127.0.0.1. Zones are ignored.
func Contains(p netip.Prefix, a netip.Addr) bool {
	a = a.WithZone("")
	if p.Contains(a) {
		return true
	}
	if e, ok := Embedded(a); ok && p.Addr().Is4() {
		return p.Contains(e)
	}
	return false
}
