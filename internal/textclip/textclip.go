package textclip

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"
)

// PreviewBytes bounds the text of a tool result that workflow history
// carries: the whole output lives in the ledger.
const PreviewBytes = 1024

// Preview is s cut to at most PreviewBytes on a character boundary, with a
// marker saying how long the whole was.
func Preview(s string) string {
	if len(s) <= PreviewBytes {
		return s
	}
	marker := fmt.Sprintf("... [%d bytes in all]", len(s))
	cut, _ := CutAtRune(s, PreviewBytes-len(marker))
	return cut + marker
}

// Digest identifies a whole output by content, for the watchdog and the
// trace: two outputs with the same digest are the same.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// Clip shortens s to about n bytes for a message, never splitting a UTF-8
// character: a split one is invalid UTF-8 in an error's protobuf string.
func Clip(s string, n int) string {
	if s, cut := CutAtRune(s, n); cut {
		return s + "..."
	}
	return s
}

// CutAtRune keeps at most n bytes of s without splitting a UTF-8
// character, and reports whether it cut anything.
func CutAtRune(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}
