package textclip

import (
	"strings"
	"unicode/utf8"
)

// Clean makes untrusted text storable and showable: invalid UTF-8 and NUL
// bytes become U+FFFD. Postgres refuses a NUL in text and in jsonb, and a
// model's or a tool's text reaches both.
func Clean(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
