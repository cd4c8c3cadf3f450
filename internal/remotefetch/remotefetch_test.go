package remotefetch

import (
	"net/netip"
	"testing"
)

func TestAllowed(t *testing.T) {
	def := Policy{}
	for _, s := range []string{
		"127.0.0.1", "127.9.9.9", "0.0.0.0", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "100.64.0.1", "100.100.100.200", "224.0.0.1", "255.255.255.255", "240.0.0.1",
		"::", "::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "fe80::1", "fd00::1", "fc00::1", "ff02::1",
		"64:ff9b::7f00:1", "2002:7f00:1::", "::127.0.0.1",
	} {
		if def.Allowed(netip.MustParseAddr(s)) {
			t.Errorf("%s allowed by default", s)
		}
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8"} {
		if !def.Allowed(netip.MustParseAddr(s)) {
			t.Errorf("%s refused by default", s)
		}
	}
	allow, err := ParseAllow([]string{"127.0.0.2/32", " 10.0.0.0/8 ", "fd00::5", "::ffff:192.168.0.0/112"})
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{Allow: allow}
	for s, want := range map[string]bool{
		"127.0.0.2": true, "127.0.0.1": false, "10.9.9.9": true, "::ffff:10.0.0.1": true,
		"fd00::5": true, "fd00::6": false, "192.168.3.4": true, "169.254.169.254": false,
	} {
		if got := p.Allowed(netip.MustParseAddr(s)); got != want {
			t.Errorf("with %v: Allowed(%s) = %v, want %v", allow, s, got, want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "localhost", "1.2.3"} {
		if _, err := ParseAllow([]string{bad}); err == nil {
			t.Errorf("ParseAllow(%q) accepted", bad)
		}
	}
}

func FuzzParseAllow(f *testing.F) {
	for _, s := range []string{"127.0.0.1/32", "::ffff:1.2.3.4/120", "fe80::1%eth0", "10.0.0.0/8", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParseAllow([]string{s})
		if err != nil {
			return
		}
		for _, p := range ps {
			if !p.IsValid() {
				t.Fatalf("ParseAllow(%q) returned an invalid prefix %v", s, p)
			}
		}
	})
}
