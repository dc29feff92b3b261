package wire

import (
	"bytes"
	"encoding/json"
	"strings"
)

// CanonicalJSON is a JSON text with its objects' keys sorted and no
// insignificant whitespace, so two calls with the same arguments compare
// equal however the model wrote them; text that is not JSON is itself.
func CanonicalJSON(text string) string {
	var v any
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return text
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return text
	}
	return strings.TrimSuffix(out.String(), "\n")
}
