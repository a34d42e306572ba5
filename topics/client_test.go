package topics

import (
	"net"
	"strings"
	"testing"
)

func TestMemberAdminAddr(t *testing.T) {
	tests := []struct {
		clientID, host string
		role, addr     string
		ok             bool
	}{
		{"hookstream-processor@10.0.0.5:8081", "/10.0.0.9", "processor", "10.0.0.5:8081", true},
		{"hookstream-dispatcher@web-1.internal:9081", "/10.0.0.9", "dispatcher", "web-1.internal:9081", true},
		{"hookstream-processor@:8081", "/10.0.0.9", "processor", "10.0.0.9:8081", true},
		{"hookstream-processor@0.0.0.0:8081", "/10.0.0.9", "processor", "10.0.0.9:8081", true},
		{"hookstream-processor@[::]:8081", "/fd00::9", "processor", "[fd00::9]:8081", true},
		{"hookstream-processor@:8081", "", "", "", false},
		{"hookstream-processor@:8081", "10.0.0.9:51234", "processor", "10.0.0.9:8081", true},
		{"hookstream-processor", "/10.0.0.9", "", "", false},
		{"hookstream-processor@", "/10.0.0.9", "", "", false},
		{"hookstream-processor@10.0.0.5", "/10.0.0.9", "", "", false},
		{"hookstream-processor@10.0.0.5:", "/10.0.0.9", "", "", false},
		{"hookstream-@10.0.0.5:8081", "/10.0.0.9", "", "", false},
		{"hookstream-processor@10.0.0.5:http", "/10.0.0.9", "", "", false},
		{"hookstream-processor@10.0.0.5:0", "/10.0.0.9", "", "", false},
		{"hookstream-processor@10.0.0.5:65536", "/10.0.0.9", "", "", false},
		{"hookstream-processor@evil/x:80", "/10.0.0.9", "", "", false},
		{"hookstream-processor@:8081", "/10.0.0.9/x", "", "", false},
		{"kgo", "/10.0.0.9", "", "", false},
		{"other-processor@10.0.0.5:8081", "/10.0.0.9", "", "", false},
	}
	for _, tt := range tests {
		role, addr, ok := MemberAdminAddr(tt.clientID, tt.host)
		if role != tt.role || addr != tt.addr || ok != tt.ok {
			t.Errorf("MemberAdminAddr(%q, %q): got %q, %q, %v; want %q, %q, %v", tt.clientID, tt.host, role, addr, ok, tt.role, tt.addr, tt.ok)
		}
	}
}

// FuzzMemberAdminAddr: client ids come from any Kafka client that joins a
// group. MemberAdminAddr never panics; what it accepts is a host:port;
// and it reads back what MemberClientID writes.
func FuzzMemberAdminAddr(f *testing.F) {
	for _, s := range []string{"hookstream-processor@10.0.0.5:8081", "hookstream-dispatcher@:8081", "kgo", "hookstream-@:", "hookstream-x@[::1]:1"} {
		f.Add(s, "/10.0.0.9")
	}
	f.Fuzz(func(t *testing.T, clientID, host string) {
		role, addr, ok := MemberAdminAddr(clientID, host)
		if !ok {
			return
		}
		if h, p, err := net.SplitHostPort(addr); err != nil || h == "" || p == "" || strings.ContainsAny(h, "/?#@") {
			t.Errorf("MemberAdminAddr(%q, %q): got address %q, want a host:port", clientID, host, addr)
		}
		if strings.Contains(role, "@") {
			return // a role with '@' is not one MemberClientID writes
		}
		again, addr2, ok2 := MemberAdminAddr(MemberClientID(role, addr), host)
		if !ok2 || again != role || addr2 != addr {
			t.Errorf("MemberAdminAddr(MemberClientID(%q, %q)): got %q, %q, %v", role, addr, again, addr2, ok2)
		}
	})
}
