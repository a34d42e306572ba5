package expr

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"

	"github.com/hookstream/hookstream/topics"
)

// appendJSON appends v as compact JSON to b, the JSON so far: it charges m
// a unit per value, and refuses to go on once the JSON's bytes, a unit per
// 10, and m's cost reach the limit.
func (m *meter) appendJSON(b []byte, v ref.Val) ([]byte, error) {
	m.cost++
	if m.cost+uint64(len(b))/10 > RuntimeCostLimit {
		return nil, errCostLimit
	}
	return m.appendValue(b, v)
}

func (m *meter) appendValue(b []byte, v ref.Val) ([]byte, error) {
	switch v := v.(type) {
	case types.Null:
		return append(b, "null"...), nil
	case types.Bool:
		return strconv.AppendBool(b, bool(v)), nil
	case types.Int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case types.Uint:
		return strconv.AppendUint(b, uint64(v), 10), nil
	case types.Double:
		return appendFloat(b, float64(v))
	case types.String:
		return topics.AppendJSONText(b, string(v)), nil
	case types.Bytes:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, []byte(v))
		return append(b, '"'), nil
	case types.Timestamp:
		b = append(b, '"')
		b = v.Time.UTC().AppendFormat(b, time.RFC3339Nano)
		return append(b, '"'), nil
	case types.Duration:
		b = append(b, '"')
		b = strconv.AppendFloat(b, v.Duration.Seconds(), 'f', -1, 64)
		return append(b, 's', '"'), nil
	case *types.Err:
		return nil, v
	case traits.Lister:
		b = append(b, '[')
		n := int64(v.Size().(types.Int))
		var err error
		for i := int64(0); i < n; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = m.appendJSON(b, v.Get(types.Int(i))); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case traits.Mapper:
		type entry struct {
			name string
			key  ref.Val
		}
		var entries []entry
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			var name string
			switch k := k.(type) {
			case types.String:
				name = string(k)
			case types.Int, types.Uint, types.Bool:
				name = fmt.Sprint(k.Value())
			default:
				return nil, fmt.Errorf("a map key of type %s cannot be a JSON object key", k.Type())
			}
			entries = append(entries, entry{name, k})
		}
		slices.SortFunc(entries, func(x, y entry) int {
			switch {
			case x.name < y.name:
				return -1
			case x.name > y.name:
				return 1
			}
			return 0
		})
		b = append(b, '{')
		var err error
		for i, e := range entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = topics.AppendJSONText(b, e.name)
			b = append(b, ':')
			if b, err = m.appendJSON(b, v.Get(e.key)); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return nil, fmt.Errorf("a value of type %s cannot be JSON", v.Type())
}

var errNotFinite = errors.New("a NaN or infinite double cannot be JSON")

// appendFloat formats f as encoding/json does.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, errNotFinite
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}
