package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

func TestParseOutages(t *testing.T) {
	windows, err := parseOutages("10s-40s, 90s-100s")
	require.NoError(t, err)
	assert.Equal(t, []bench.Window{{From: 10 * time.Second, To: 40 * time.Second}, {From: 90 * time.Second, To: 100 * time.Second}}, windows)
	none, err := parseOutages("")
	require.NoError(t, err)
	assert.Empty(t, none)
	for input, want := range map[string]string{
		"10s":      "want FROM-TO",
		"x-40s":    "start",
		"10s-y":    "end",
		"40s-10s":  "the end must come after the start",
		"-5s-10s":  "start",
		"10s-10s":  "the end must come after the start",
		"1s-2s,3s": "want FROM-TO",
	} {
		_, err := parseOutages(input)
		assert.ErrorContains(t, err, want, "input %q", input)
		assert.ErrorContains(t, err, "--outage", "input %q", input)
	}
}
