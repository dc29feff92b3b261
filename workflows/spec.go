package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/budget"
)

// RunSpec is everything a run needs: the goal, the model, the tools and the
// budget. It is the AgentRun workflow's input, so it must hold no secrets.
type RunSpec struct {
	Goal string `json:"goal"`
	// System replaces the default system prompt.
	System string                `json:"system,omitempty"`
	Model  activities.ModelSpec  `json:"model"`
	Tools  []activities.ToolSpec `json:"tools,omitempty"`
	Budget budget.Limits         `json:"budget"`
	// FinishAt is the fraction of budget left at which the run switches to
	// its graceful finish; the default is 0.2.
	FinishAt float64 `json:"finish_at,omitempty"`
	// Retry holds the per-call, per-tool and run retry allowances.
	Retry  budget.RetryPolicy `json:"retry,omitempty"`
	Prices budget.Prices      `json:"prices,omitempty"`
}

// ParseSpec reads a run spec from YAML or JSON. Unknown fields are errors,
// so a typo is reported rather than ignored.
func ParseSpec(data []byte) (RunSpec, error) {
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return RunSpec{}, fmt.Errorf("spec: not valid YAML or JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(asJSON))
	dec.DisallowUnknownFields()
	var spec RunSpec
	if err := dec.Decode(&spec); err != nil {
		return RunSpec{}, fmt.Errorf("spec: %w", err)
	}
	if err := spec.Validate(); err != nil {
		return RunSpec{}, fmt.Errorf("spec: %w", err)
	}
	return spec, nil
}

// ReadSpec parses the spec file at path.
func ReadSpec(path string) (RunSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return RunSpec{}, fmt.Errorf("spec: %w", err)
	}
	spec, err := ParseSpec(data)
	if err != nil {
		return RunSpec{}, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

// Validate reports the first thing wrong with the spec, naming the field.
func (s RunSpec) Validate() error {
	if s.Goal == "" {
		return fmt.Errorf("goal: missing")
	}
	if err := s.Model.Validate(); err != nil {
		return err
	}
	if err := s.Budget.Validate(); err != nil {
		return err
	}
	if s.FinishAt != 0 && (s.FinishAt <= 0 || s.FinishAt >= 1) {
		return fmt.Errorf("finish_at: %v is outside (0, 1)", s.FinishAt)
	}
	if err := s.Retry.Validate(); err != nil {
		return err
	}
	if err := s.Prices.Validate(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, tool := range s.Tools {
		if err := tool.Validate(); err != nil {
			return fmt.Errorf("tools[%d]: %w", i, err)
		}
		if seen[tool.Name] {
			return fmt.Errorf("tools[%d]: a tool named %q is declared twice", i, tool.Name)
		}
		seen[tool.Name] = true
	}
	return nil
}

func (s RunSpec) tool(name string) (activities.ToolSpec, bool) {
	for _, t := range s.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return activities.ToolSpec{}, false
}

func (s RunSpec) finishAt() float64 {
	if s.FinishAt > 0 {
		return s.FinishAt
	}
	return 0.2
}
