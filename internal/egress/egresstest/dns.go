// Package egresstest provides a *net.Resolver that answers from a Go
// function instead of the network, so tests can make any name resolve to
// any address (127.0.0.1, 169.254.169.254, ::ffff:127.0.0.1, ...) without
// leaving the process: pass it to egress.WithResolver.
//
// The resolver is the pure-Go one (PreferGo) whose Dial hands it one end of
// an in-memory pipe; the other end is a minimal DNS responder (RFC 1035
// message format over the TCP framing of §4.2.2: a 2-byte length before
// each message) answering A and AAAA questions. Names in /etc/hosts
// (localhost) are still answered from there, as by any Go resolver.
// Safe for concurrent use.
package egresstest

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
)

// Lookup answers one question: the addresses of name (lower case, no
// trailing dot) for an AAAA question when ipv6, else for an A question.
// Returning no address answers NXDOMAIN; addresses of the other family
// only, an empty answer. It may be called concurrently.
type Lookup func(name string, ipv6 bool) []netip.Addr

// Resolver returns a resolver that answers every question with lookup.
func Resolver(lookup Lookup) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go serve(server, lookup)
		return client, nil
	}}
}

// Static returns a resolver for a fixed table: name → addresses (both
// families; each question gets those of its family).
func Static(table map[string][]string) *net.Resolver {
	m := map[string][]netip.Addr{}
	for name, addrs := range table {
		for _, a := range addrs {
			m[strings.ToLower(name)] = append(m[strings.ToLower(name)], netip.MustParseAddr(a))
		}
	}
	return Resolver(func(name string, _ bool) []netip.Addr { return m[name] })
}

// Sequence returns a resolver that answers the n-th A or AAAA question
// for name (counted per family, from 0) with answers[min(n, len-1)], so a
// name can resolve to one address first and to another afterwards (DNS
// rebinding). Other names answer NXDOMAIN.
func Sequence(name string, answers ...string) *net.Resolver {
	var mu sync.Mutex
	n := map[bool]int{}
	return Resolver(func(q string, ipv6 bool) []netip.Addr {
		if q != strings.ToLower(name) || len(answers) == 0 {
			return nil
		}
		mu.Lock()
		i := min(n[ipv6], len(answers)-1)
		n[ipv6]++
		mu.Unlock()
		return []netip.Addr{netip.MustParseAddr(answers[i])}
	})
}

const (
	typeA    = 1
	typeAAAA = 28
)

// serve answers one length-prefixed DNS query on c, then closes it.
func serve(c net.Conn, lookup Lookup) {
	defer c.Close()
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, msg); err != nil {
		return
	}
	resp, err := answer(msg, lookup)
	if err != nil {
		return
	}
	out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
	_, _ = c.Write(append(out, resp...))
}

// answer builds the response to query msg.
func answer(msg []byte, lookup Lookup) ([]byte, error) {
	if len(msg) < 12 || binary.BigEndian.Uint16(msg[4:6]) != 1 {
		return nil, errors.New("want one question")
	}
	var labels []string
	i := 12
	for {
		if i >= len(msg) {
			return nil, errors.New("truncated name")
		}
		n := int(msg[i])
		i++
		if n == 0 {
			break
		}
		if n > 63 || i+n > len(msg) {
			return nil, errors.New("bad label")
		}
		labels = append(labels, string(msg[i:i+n]))
		i += n
	}
	if i+4 > len(msg) {
		return nil, errors.New("truncated question")
	}
	qtype := binary.BigEndian.Uint16(msg[i : i+2])
	question := msg[12 : i+4]
	name := strings.ToLower(strings.Join(labels, "."))
	var addrs []netip.Addr
	any := false
	if qtype == typeA || qtype == typeAAAA {
		for _, a := range lookup(name, qtype == typeAAAA) {
			any = true
			if (qtype == typeA) == a.Is4() {
				addrs = append(addrs, a)
			}
		}
	}
	flags := uint16(0x8000 | 0x0400 | 0x0100 | 0x0080) // QR, AA, RD, RA
	if !any {
		flags |= 3 // NXDOMAIN
	}
	out := make([]byte, 12, 12+len(question)+len(addrs)*28)
	copy(out[0:2], msg[0:2])
	binary.BigEndian.PutUint16(out[2:4], flags)
	binary.BigEndian.PutUint16(out[4:6], 1)
	binary.BigEndian.PutUint16(out[6:8], uint16(len(addrs)))
	out = append(out, question...)
	for _, a := range addrs {
		out = append(out, 0xc0, 12) // pointer to the question's name
		out = binary.BigEndian.AppendUint16(out, qtype)
		out = binary.BigEndian.AppendUint16(out, 1) // IN
		out = binary.BigEndian.AppendUint32(out, 0) // TTL
		b := a.AsSlice()
		out = binary.BigEndian.AppendUint16(out, uint16(len(b)))
		out = append(out, b...)
	}
	return out, nil
}
