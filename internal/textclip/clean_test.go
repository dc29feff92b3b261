package textclip_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentsaga/agentsaga/internal/textclip"
)

// What Postgres and protobuf cannot carry becomes U+FFFD; the rest is kept
// as it came.
func TestCleanReplacesWhatCannotBeStored(t *testing.T) {
	assert.Equal(t, "plain text, ünïcode", textclip.Clean("plain text, ünïcode"))
	assert.Equal(t, "a\uFFFDb", textclip.Clean("a\x00b"))
	assert.Equal(t, "a\uFFFDb", textclip.Clean("a\xffb"))
	assert.Equal(t, "\uFFFD\uFFFD", textclip.Clean("\x00\x00"))
}
