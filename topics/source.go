package topics

// MaxSourceNames bounds the source names a process keeps apart in its
// counts and metric labels: with unknown sources allowed, anyone reaching
// the receiver can make names up.
const MaxSourceNames = 200

// OtherSource is the name that sources past MaxSourceNames count under.
const OtherSource = "_other"

// SourceNames gives each source name the name it counts under: itself
// for the first MaxSourceNames names it is given, OtherSource for any
// later one. Its zero value is ready to use; it is not safe for
// concurrent use.
type SourceNames struct {
	kept map[string]struct{}
}

// Name returns the name source counts under.
func (s *SourceNames) Name(source string) string {
	if _, ok := s.kept[source]; ok {
		return source
	}
	if len(s.kept) >= MaxSourceNames {
		return OtherSource
	}
	if s.kept == nil {
		s.kept = make(map[string]struct{})
	}
	s.kept[source] = struct{}{}
	return source
}
