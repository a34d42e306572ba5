package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/hookstream/hookstream/topics"
)

// source is one provider's compiled configuration.
type source struct {
	verifier Verifier
	id, typ  *Field
	limiter  *rate.Limiter // nil: unlimited
	validate Validation
	// carried lists the request headers copied to the record, with their
	// record header keys.
	carried []carriedHeader
}

type carriedHeader struct {
	name string // canonical request header name
	key  string // hs-h-<lowercased name>
}

// compileSources builds every configured source; errors name the key.
func compileSources(cfg Sources) (map[string]*source, error) {
	out := make(map[string]*source, len(cfg.Sources))
	names := make([]string, 0, len(cfg.Sources))
	for name := range cfg.Sources {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s, err := compileSource(cfg.Sources[name])
		if err != nil {
			return nil, fmt.Errorf("HOOKSTREAM_CONFIG: sources.%s.%w", name, err)
		}
		out[name] = s
	}
	return out, nil
}

func compileSource(c Source) (*source, error) {
	v, err := NewVerifier(c.Verify)
	if err != nil {
		return nil, err
	}
	id, err := ParseField(c.EventID)
	if err != nil {
		return nil, fmt.Errorf("event_id: %w", err)
	}
	typ, err := ParseField(c.EventType)
	if err != nil {
		return nil, fmt.Errorf("event_type: %w", err)
	}
	if len(c.Validate.rules) != len(c.Validate.Schemas) {
		return nil, errors.New("validate.schemas: not compiled (sources that validate are read with LoadSources)")
	}
	s := &source{verifier: v, id: id, typ: typ, validate: c.Validate}
	if c.RateLimit != "" {
		perSecond, burst, err := ParseRate(c.RateLimit)
		if err != nil {
			return nil, fmt.Errorf("rate_limit: %w", err)
		}
		s.limiter = rate.NewLimiter(rate.Limit(perSecond), burst)
	}
	// The signature and event headers travel with the record so that
	// consumers can re-verify and see what the provider said.
	names := slices.Concat(v.Headers(), c.Headers)
	if id != nil {
		names = append(names, id.Headers()...)
	} else {
		names = append(names, DefaultIDHeaders...)
	}
	if typ != nil {
		names = append(names, typ.Headers()...)
	}
	s.carried = carry(names)
	return s, nil
}

// carry canonicalizes and deduplicates header names.
func carry(names []string) []carriedHeader {
	seen := make(map[string]bool, len(names))
	var out []carriedHeader
	for _, n := range names {
		canon := http.CanonicalHeaderKey(n)
		if canon == "" || seen[canon] {
			continue
		}
		seen[canon] = true
		out = append(out, carriedHeader{name: canon, key: topics.ProviderHeaderKey(canon)})
	}
	return out
}

// provider returns the carried headers of a request, in record form.
func (s *source) provider(in http.Header) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(s.carried))
	for _, ch := range s.carried {
		if v := in.Values(ch.name); len(v) > 0 {
			out = append(out, kgo.RecordHeader{Key: ch.key, Value: []byte(v[0])})
		}
	}
	return out
}
