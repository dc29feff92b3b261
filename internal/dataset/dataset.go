// Package dataset owns eval datasets (issue 34): the JSONL file a team
// keeps in its repository, one recorded run a line (Entry), exported from
// the ledger (Export) with personal data redacted by JSON path (Redact),
// brought back into a ledger as a replay's source (Import), and the checks
// a replay of each entry must pass (Entry.Checks, Check). Running the
// replays is the caller's: the CLI's eval on the workers, agentsagatest's
// Replay in the test environment.
package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Version is the format of the entries this package writes. An entry of
// another version is refused rather than guessed at.
const Version = 1

// Entry is one recorded run, one line of a dataset.
type Entry struct {
	Version int    `json:"version"`
	Source  string `json:"source"` // the recorded run's workflow ID
	Goal    string `json:"goal"`
	// Spec is the spec the run was recorded with.
	Spec   json.RawMessage `json:"spec"`
	Calls  []Call          `json:"calls"`
	Answer string          `json:"answer,omitempty"`
	Status string          `json:"status"`
	Reason string          `json:"reason,omitempty"`
	Steps  int             `json:"steps"`
	Tokens int64           `json:"tokens"`
	USD    float64         `json:"usd"`
	WallMS int64           `json:"wall_ms"`
	// Redacted lists the JSON paths redacted when the entry was written.
	Redacted []string `json:"redacted,omitempty"`
	// Checks are written by hand; dataset add writes none.
	Checks []Check `json:"checks"`
}

// Call is one tool call the recorded run's model asked for, in order.
type Call struct {
	Step      int             `json:"step"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"` // canonical JSON
	// Sent: the call reached its tool (it has an outcome); a call the
	// workflow refused before it left (a denial, a limit) was not.
	Sent      bool      `json:"sent"`
	Output    string    `json:"output,omitempty"`
	Error     string    `json:"error,omitempty"`
	ErrorType string    `json:"error_type,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	Approval  *Decision `json:"approval,omitempty"`
	// Agent is the recording of the sub-agent a sub-agent call started:
	// its own goal, spec, calls and outcome (its checks are the parent's).
	Agent *Entry `json:"agent,omitempty"`
}

// Decision is a recorded approval decision.
type Decision struct {
	Status string `json:"status"` // approved, denied, timed-out
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	Why    string `json:"why,omitempty"` // what made the call need it
}

// Wall is the recorded run's wall clock.
func (e Entry) Wall() time.Duration { return time.Duration(e.WallMS) * time.Millisecond }

// Line is an entry read from a dataset file, with where it was.
type Line struct {
	N     int // 1-based line number
	Entry Entry
}

// Read reads a dataset file: every non-blank line an entry.
func Read(path string) ([]Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	return Decode(f, path)
}

// Decode reads a dataset's lines from r; name says where they came from in
// errors.
func Decode(r io.Reader, name string) ([]Line, error) {
	var lines []Line
	scan := bufio.NewScanner(r)
	scan.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for n := 1; scan.Scan(); n++ {
		text := bytes.TrimSpace(scan.Bytes())
		if len(text) == 0 {
			continue
		}
		e, err := Parse(text)
		if err != nil {
			return nil, fmt.Errorf("dataset %s line %d: %w", name, n, err)
		}
		lines = append(lines, Line{N: n, Entry: e})
	}
	if err := scan.Err(); err != nil {
		return nil, fmt.Errorf("dataset %s: %w", name, err)
	}
	return lines, nil
}

// Parse reads one entry and checks what a replay of it needs.
func Parse(line []byte) (Entry, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var e Entry
	if err := dec.Decode(&e); err != nil {
		return Entry{}, fmt.Errorf("not an entry: %w", err)
	}
	switch {
	case e.Version != Version:
		return Entry{}, fmt.Errorf("format version %d; this agentsaga reads version %d", e.Version, Version)
	case e.Source == "":
		return Entry{}, errors.New("no source run")
	case len(e.Spec) == 0:
		return Entry{}, errors.New("no spec")
	}
	for i, c := range e.Checks {
		if err := c.validate(); err != nil {
			return Entry{}, fmt.Errorf("check %d: %w", i+1, err)
		}
	}
	if err := e.validateAgents(); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// validateAgents checks the sub-agents' recordings nested in e's calls:
// each has its source and spec, and no checks (a check is the whole
// run's, sub-agents included, so it goes on the entry).
func (e Entry) validateAgents() error {
	for _, c := range e.Calls {
		a := c.Agent
		switch {
		case a == nil:
			continue
		case a.Source == "" || len(a.Spec) == 0:
			return fmt.Errorf("the sub-agent of call %s at turn %d has no source run or no spec", c.Tool, c.Step)
		case len(a.Checks) > 0:
			return fmt.Errorf("the sub-agent of call %s at turn %d has checks; put them on the entry, where they count the sub-agents' calls too", c.Tool, c.Step)
		}
		if err := a.validateAgents(); err != nil {
			return err
		}
	}
	return nil
}

// Append writes entries at the end of the dataset file at path, creating
// it, in one write: a failure writes no partial line.
func Append(path string, entries ...Entry) error {
	var buf bytes.Buffer
	for _, e := range entries {
		line, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("dataset: encode the entry of %s: %w", e.Source, err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("dataset: append to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("dataset: append to %s: %w", path, err)
	}
	return nil
}

// clip shortens s for a message.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
