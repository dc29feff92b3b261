package ledgerdb

import (
	"strings"
	"unicode/utf8"
)

// MaxStoredText caps the free text the ledger keeps in one column: an
// action's result or error, a leaf call's error, a run's answer, handoff
// note, reason or status detail, a compensation's error or reason. Longer
// text is cut on a character boundary and ends with TextTruncatedMarker,
// the whole within MaxStoredText. Tool results arrive already capped at
// 64 KiB (activities' maxToolOutput), so they are stored whole; this is
// the backstop for every other writer.
const MaxStoredText = 1 << 20

// TextTruncatedMarker ends a text the ledger cut at MaxStoredText.
const TextTruncatedMarker = "\n[truncated by the ledger: text exceeded 1 MiB]"

// storable makes free text fit a Postgres text column: invalid UTF-8 and
// NUL, which Postgres rejects, become U+FFFD, and it is capped at
// MaxStoredText. Without this, one bad byte in a tool's error or a model's
// answer fails the write, and a run's last bookkeeping retries forever.
// Identifiers and arguments (keys, workflow and activity IDs, tools) are
// never altered: changing one would change what it names, so Postgres
// rejects them instead, with an error that says which byte.
func storable(s string) string {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	}
	if len(s) <= MaxStoredText {
		return s
	}
	cut := MaxStoredText - len(TextTruncatedMarker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + TextTruncatedMarker
}
