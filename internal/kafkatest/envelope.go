package kafkatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/schemas"
)

// CheckEnvelope fails t unless r's value is a valid envelope (see
// ValidateEnvelope).
func CheckEnvelope(t testing.TB, r *kgo.Record) {
	t.Helper()
	if err := ValidateEnvelope(r.Value); err != nil {
		t.Errorf("%s/%d offset %d (key %s): %v", r.Topic, r.Partition, r.Offset, r.Key, err)
	}
}

// ValidateEnvelope validates an envelope against schemas/envelope.json,
// formats asserted, and refuses any top-level field the schema does not
// declare: the published schema leaves readers free to meet fields of a
// later minor version, but what hookstream writes must all be documented.
func ValidateEnvelope(value []byte) error {
	sch, err := strictEnvelope()
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("envelope is not JSON: %w", err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("envelope does not match schemas/envelope.json: %w", err)
	}
	return nil
}

var strictEnvelope = sync.OnceValues(func() (*jsonschema.Schema, error) {
	var doc map[string]any
	if err := json.Unmarshal(schemas.Envelope, &doc); err != nil {
		return nil, fmt.Errorf("schemas/envelope.json: %w", err)
	}
	doc["additionalProperties"] = false
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.AssertContent()
	const url = "envelope.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("schemas/envelope.json: %w", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("schemas/envelope.json: %w", err)
	}
	return sch, nil
})
