package workflows

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// Recorded is the spec of a replay of the recorded run source under the
// workflow ID replay: every tool that live does not name (live may name
// only read_only tools) becomes a tool of kind recorded, answered from
// source's ledger and matched as match says (agentsagatype.MatchInOrder or
// MatchAnyOrder). What a recorded tool keeps
// is what the model and the gates read: its name, description, parameters,
// refusal rules, approval rule, limits and hints. Its URL, method, headers,
// MCP server and command are dropped, and its compensation with them: the
// worker that runs the replay has no way to send its calls anywhere, and a
// replay that fails has nothing to undo. A sub-agent stays a sub-agent; its
// tools are the parent's, rewritten alike.
//
// An MCP server entry is refused unless it is live (and so read_only): its
// tools are listed from the server when the run starts, which would reach
// the server.
func (s RunSpec) Recorded(source, replay, match string, live ...string) (RunSpec, error) {
	if source == "" || replay == "" {
		return RunSpec{}, fmt.Errorf("replay: the source run and the replay's ID are required")
	}
	if match == "" {
		match = agentsagatype.MatchInOrder
	}
	if match != agentsagatype.MatchInOrder && match != agentsagatype.MatchAnyOrder {
		return RunSpec{}, fmt.Errorf("replay: match %q is not %q or %q", match, agentsagatype.MatchInOrder, agentsagatype.MatchAnyOrder)
	}
	for _, name := range live {
		tool, ok := s.tool(name)
		if !ok {
			var names []string
			for _, t := range s.Tools {
				names = append(names, t.Name)
			}
			return RunSpec{}, fmt.Errorf("replay: --live %s: the spec has no tool of that name (tools: %s)", name, strings.Join(names, ", "))
		}
		if !tool.ReadOnly {
			// Nothing a replay does may change the world: only a tool its
			// spec says only reads is called for real.
			return RunSpec{}, fmt.Errorf("replay: --live %s: the tool is not marked read_only in the spec, and a replay calls for real only tools that change nothing", name)
		}
	}
	out := s
	out.Carried = nil
	out.Tools = make([]agentsagatype.ToolSpec, len(s.Tools))
	for i, t := range s.Tools {
		switch {
		case slices.Contains(live, t.Name), t.Kind == agentsagatype.ToolKindAgent:
			out.Tools[i] = t
			if t.Compensate != nil && !slices.Contains(live, t.Compensate.Tool) {
				// A live tool's undo would be a recorded one: drop it rather
				// than pretend a compensation ran.
				out.Tools[i].Compensate = nil
			}
			continue
		case t.IsMCPServer():
			return RunSpec{}, fmt.Errorf("replay: tool %s is an MCP server whose tools are listed from the server when a run starts; a replay cannot list it without reaching it (name it with --live to call it for real)", t.Name)
		}
		out.Tools[i] = agentsagatype.ToolSpec{
			Name: t.Name, Description: t.Description, Kind: agentsagatype.ToolKindRecorded, Parameters: t.Parameters,
			TimeoutSeconds: t.TimeoutSeconds, Refusal: t.Refusal, Irreversible: t.Irreversible, ReadOnly: t.ReadOnly,
			Approval: t.Approval, Limits: t.Limits,
			Recording: &agentsagatype.Recording{Source: source, Replay: replay, Match: match},
		}
	}
	if err := out.Validate(); err != nil {
		return RunSpec{}, fmt.Errorf("replay: the rewritten spec: %w", err)
	}
	return out, nil
}

// IsReplay says whether the spec is a replay's: one of its tools is
// recorded. A replay's rollback compensates nothing.
func (s RunSpec) IsReplay() bool {
	return slices.ContainsFunc(s.Tools, func(t agentsagatype.ToolSpec) bool { return t.Kind == agentsagatype.ToolKindRecorded })
}
