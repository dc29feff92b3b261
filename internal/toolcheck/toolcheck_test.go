package toolcheck_test

import (
	"testing"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
)

// A tool declares the rate its dependency takes in requests only; tokens
// and concurrency are a model's, and a negative rate names its field.
func TestToolRateLimit(t *testing.T) {
	tool := agentsagatype.ToolSpec{Name: "crm", Kind: agentsagatype.ToolKindHTTP, URL: "http://crm.internal/update"}
	for _, tc := range []struct {
		limit agentsagatype.RateLimit
		want  string
	}{
		{agentsagatype.RateLimit{RequestsPerMinute: 600}, ""},
		{agentsagatype.RateLimit{TokensPerMinute: 100}, "tool crm: rate_limit: a tool declares requests_per_minute only (tokens and concurrency are a model's)"},
		{agentsagatype.RateLimit{RequestsPerMinute: -1}, "tool crm: rate_limit.requests_per_minute: -1 is negative (omit it, or 0, for not declared)"},
	} {
		tool.RateLimit = &tc.limit
		err := toolcheck.Validate(tool)
		if got := ""; err != nil {
			got = err.Error()
			if got != tc.want {
				t.Errorf("Validate(%+v) = %q, want %q", tc.limit, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("Validate(%+v) = nil, want %q", tc.limit, tc.want)
		}
	}
}
