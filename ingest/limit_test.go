package ingest

import "testing"

// TestClientPrefix: failed verifications are counted per IPv4 address and
// per IPv6 /64, so one IPv6 host cannot rotate through its addresses.
func TestClientPrefix(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{"192.0.2.1", "192.0.2.1", true},
		{"192.0.2.1", "192.0.2.2", false},
		{"::ffff:192.0.2.1", "192.0.2.1", true},
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9", true},
		{"2001:db8:1:2::1", "2001:db8:1:3::1", false},
		{"fe80::1%eth0", "fe80::2", true},
	}
	for _, tt := range tests {
		if got := clientPrefix(tt.a) == clientPrefix(tt.b); got != tt.same {
			t.Errorf("%s and %s counted together: got %v, want %v", tt.a, tt.b, got, tt.same)
		}
	}
}
