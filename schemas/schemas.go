// Package schemas holds the JSON Schemas (2020-12) of the records
// hookstream publishes to other teams: Envelope, the value of every
// <prefix>.events record and the body of every delivery. The files are the
// contract; hookstream's tests validate every envelope they read from the
// events topic against them. The package holds no validator: readers use
// the JSON Schema library of their language.
package schemas

import _ "embed"

// Envelope is schemas/envelope.json, the schema of the envelope at
// topics.EnvelopeSchemaVersion's major version.
//
//go:embed envelope.json
var Envelope []byte
