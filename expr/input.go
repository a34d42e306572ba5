package expr

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"

	"github.com/hookstream/hookstream/topics"
)

// Input is one event as expressions see it. It is built once per event
// and shared by every evaluation of it, concurrent ones included: the JSON
// body is parsed at most once, by the first evaluation that reads data.
type Input struct {
	id, source, eventID, typ ref.Val
	receivedAt, replay       ref.Val
	headers, form            ref.Val

	body     []byte
	dataOnce sync.Once
	data     ref.Val
}

// NewInput returns env as expressions see it. It keeps env's body, which
// must not change while the Input is in use.
func NewInput(env *topics.Envelope) *Input {
	in := &Input{
		id:         types.String(env.ID),
		source:     types.String(env.Source),
		eventID:    types.String(env.EventID),
		typ:        types.String(env.Type),
		receivedAt: types.Timestamp{Time: env.ReceivedAt.UTC()},
		replay:     types.Int(env.Replay),
		body:       env.Data,
	}
	headers := env.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	in.headers = types.NewStringStringMap(types.DefaultTypeAdapter, headers)
	form := make(map[string]any, len(env.Form))
	for k, v := range env.Form {
		switch v := v.(type) {
		case string:
			form[k] = types.String(v)
		case []string:
			form[k] = types.NewStringList(types.DefaultTypeAdapter, v)
		default:
			// A form parsed from its JSON: strings and arrays of strings.
			form[k] = fromJSON(v)
		}
	}
	in.form = types.NewStringInterfaceMap(types.DefaultTypeAdapter, form)
	return in
}

// dataValue is the event's body as CEL sees it, parsed on the first call.
func (in *Input) dataValue() ref.Val {
	in.dataOnce.Do(func() {
		in.data = types.NullValue
		if len(in.body) == 0 {
			return
		}
		v, err := parseJSON(in.body)
		if err != nil {
			// The processor embeds only valid JSON as data; anything
			// else is not JSON, as for a body in data_base64.
			return
		}
		in.data = v
	})
	return in.data
}

// fromJSON converts a value decoded by encoding/json with UseNumber to CEL:
// a number is an int when it is integral and fits, else a double.
func fromJSON(v any) ref.Val {
	switch v := v.(type) {
	case nil:
		return types.NullValue
	case bool:
		return types.Bool(v)
	case string:
		return types.String(v)
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return types.Int(i)
		}
		// Out of a double's range, ±Inf.
		f, _ := strconv.ParseFloat(string(v), 64)
		return types.Double(f)
	case float64:
		return types.Double(v)
	case []any:
		l := make([]ref.Val, len(v))
		for i, e := range v {
			l[i] = fromJSON(e)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, l)
	case []string:
		return types.NewStringList(types.DefaultTypeAdapter, v)
	case map[string]any:
		for k, e := range v {
			v[k] = fromJSON(e)
		}
		return types.NewStringInterfaceMap(types.DefaultTypeAdapter, v)
	case ref.Val:
		return v
	}
	return types.NullValue
}

// activation is the Input as cel-go resolves variables in it.
type activation Input

func (in *Input) activation() *activation { return (*activation)(in) }

func (a *activation) ResolveName(name string) (any, bool) {
	in := (*Input)(a)
	switch name {
	case "id":
		return in.id, true
	case "source":
		return in.source, true
	case "event_id":
		return in.eventID, true
	case "type":
		return in.typ, true
	case "received_at":
		return in.receivedAt, true
	case "headers":
		return in.headers, true
	case "data":
		return in.dataValue(), true
	case "form":
		return in.form, true
	case "replay":
		return in.replay, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }
