package activities

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

// Each status a waiting run records is the event a watcher reads of it.
func TestAStatusIsTheEventOfItsWait(t *testing.T) {
	assert.Equal(t, runevents.Escalated, statusEvent(agentsagatype.RunEscalated, "the breaker of tool crm is open"))
	assert.Equal(t, runevents.Parked, statusEvent(agentsagatype.RunRunning, "waiting for tool crm: its circuit breaker is open; the call goes out again at 10:00:00Z"))
	assert.Equal(t, runevents.QuotaWait, statusEvent(agentsagatype.RunRunning, "waiting for the quota of the model openai:gpt-4o-mini: its provider's rate limit has no room"))
	assert.Equal(t, runevents.QuotaWait, statusEvent(agentsagatype.RunRunning, "waiting for the spend cap of account acme to reset at 2026-12-04T00:00:00Z"))
	assert.Equal(t, runevents.Released, statusEvent(agentsagatype.RunRunning, ""))
	assert.Equal(t, runevents.Resumed, statusEvent(agentsagatype.RunRunning, "after resume"), "the detail workflows/humans.go writes")
}
