package netclass_test

import (
	"net/netip"
	"testing"

	"github.com/toolgate/toolgate/internal/netclass"
)

func TestClassify(t *testing.T) {
	for addr, want := range map[string]string{
		"8.8.8.8": "", "93.184.215.14": "", "2606:4700::1111": "", "::ffff:8.8.8.8": "", "64:ff9b::808:808": "",
		"127.0.0.1": "loopback", "127.255.0.9": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"::127.0.0.1": "loopback", "64:ff9b::127.0.0.1": "loopback", "64:ff9b:1::7f00:1": "loopback", "2002:7f00:1::": "loopback",
		"169.254.169.254": "link-local", "fe80::1%eth0": "link-local", "::ffff:a9fe:a9fe": "link-local",
		"10.0.0.1": "private", "172.31.255.255": "private", "172.32.0.1": "", "192.168.0.1": "private", "fc00::1": "private", "fdff::1": "private",
		"100.64.0.1": "cgnat", "100.127.255.255": "cgnat", "100.128.0.1": "",
		"0.0.0.0": "unspecified", "0.1.2.3": "unspecified", "::": "unspecified",
		"224.0.0.251": "multicast", "ff02::fb": "multicast", "255.255.255.255": "broadcast", "240.0.0.1": "reserved",
	} {
		if got := netclass.Classify(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Classify(%s) = %q, want %q", addr, got, want)
		}
	}
	if netclass.Classify(netip.Addr{}) != netclass.Unspecified {
		t.Error("the zero Addr must be unspecified")
	}
}

func TestContains(t *testing.T) {
	p := netip.MustParsePrefix("127.0.0.0/8")
	for addr, want := range map[string]bool{"127.0.0.1": true, "::ffff:127.0.0.1": true, "::1": false, "10.0.0.1": false} {
		if got := netclass.Contains(p, netip.MustParseAddr(addr)); got != want {
			t.Errorf("Contains(%s, %s) = %v, want %v", p, addr, got, want)
		}
	}
}
