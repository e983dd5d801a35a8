// Package canonjson implements RFC 8785 JSON Canonicalization Scheme (JCS).
//
// PROVISIONAL: this file is a placeholder with the final API; it is being
// replaced by an exact implementation.
package canonjson

import (
	"bytes"
	"encoding/json"
)

// Canonicalize parses JSON text and returns its RFC 8785 canonical form.
func Canonicalize(data []byte) ([]byte, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
