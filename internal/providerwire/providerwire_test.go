package providerwire

import (
	"bytes"
	"encoding/json"
	"testing"
)

// A string cut into pieces keeps its bytes: every piece is a JSON string
// of its own, no escape or character is split (a surrogate pair stays
// whole), and the pieces read back to what the whole string read.
func TestStringPiecesKeepTheBytes(t *testing.T) {
	literal := json.RawMessage("\"a\\u00e9\\ud83d\\ude00\\n\xff\xfeé\\\"z\"")
	var whole string
	if err := json.Unmarshal(literal, &whole); err != nil {
		t.Fatal(err)
	}
	for piece := 1; piece <= 4; piece++ {
		pieces := stringPieces(literal, piece)
		var joined, raw bytes.Buffer
		for _, p := range pieces {
			var s string
			if err := json.Unmarshal(p, &s); err != nil {
				t.Fatalf("piece %s (of %d characters) is no JSON string: %v", p, piece, err)
			}
			joined.WriteString(s)
			raw.Write(p[1 : len(p)-1])
		}
		if joined.String() != whole {
			t.Errorf("%d characters a piece: the pieces read %q, the whole %q", piece, joined.String(), whole)
		}
		if raw.String() != string(literal[1:len(literal)-1]) {
			t.Errorf("%d characters a piece: the bytes changed: %q", piece, raw.String())
		}
	}
	// a, é, the pair, \n, two invalid bytes, é, \" and z.
	if got := len(stringPieces(literal, 1)); got != 9 {
		t.Errorf("one character a piece gave %d pieces, want 9", got)
	}
	if got := stringPieces(literal, 0); len(got) != 1 || !bytes.Equal(got[0], literal) {
		t.Errorf("no limit gave %q, want the literal whole", got)
	}
	if got := stringPieces(json.RawMessage(`""`), 3); got != nil {
		t.Errorf("an empty string gave %q, want no pieces", got)
	}
}

// A reply that is not a JSON object is refused, so that a fake never
// streams an empty reply in place of a broken one.
func TestEventsRefuseWhatIsNoReply(t *testing.T) {
	for _, reply := range []string{"null", "[]", "", "<html>"} {
		if _, err := ChatCompletionEvents([]byte(reply), FakePiece); err == nil {
			t.Errorf("ChatCompletionEvents(%q) gave no error", reply)
		}
		if _, err := MessageEvents([]byte(reply), FakePiece); err == nil {
			t.Errorf("MessageEvents(%q) gave no error", reply)
		}
	}
}
