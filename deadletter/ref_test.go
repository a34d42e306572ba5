package deadletter

import (
	"testing"

	"github.com/hookstream/hookstream/topics"
)

// FuzzRef checks the hs-redriven-from codec: parsing never panics, accepts
// only canonical values (a parsed value formats back to itself), and
// parsing a formatted reference is the identity.
func FuzzRef(f *testing.F) {
	f.Add("hookstream.dlq/3/42", int32(3), int64(42))
	f.Add("t-x.delivery-dlq/0/0", int32(0), int64(0))
	f.Add("a/b/c/1/2", int32(1), int64(2))
	f.Add("dlq/-1/2", int32(-1), int64(2))
	f.Add("dlq/01/2", int32(1), int64(2))
	f.Add("/1/2", int32(1), int64(2))
	f.Fuzz(func(t *testing.T, s string, partition int32, offset int64) {
		if topic, p, o, ok := parseRef(s); ok {
			if got := ref(topic, p, o); got != s {
				t.Errorf("parseRef(%q) = %q %d %d, which formats as %q", s, topic, p, o, got)
			}
		}
		if partition < 0 || offset < 0 {
			return
		}
		topic := topics.Topic("hookstream.dlq")
		if gotT, gotP, gotO, ok := parseRef(ref(topic, partition, offset)); !ok || gotT != topic || gotP != partition || gotO != offset {
			t.Errorf("parseRef(ref(%s, %d, %d)) = %s %d %d %v", topic, partition, offset, gotT, gotP, gotO, ok)
		}
	})
}
