// Package toolcheck validates what a spec declares about a tool, and a
// call's arguments against it: the tool's fields, its JSON Schema, its
// header templates and its refusal rules. It is pure (no I/O), so the
// workflow checks a spec with it when a run starts, and the activity checks
// each call's arguments with the same code.
package toolcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/refusal"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/net/http/httpguts"
)

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Validate reports the first thing wrong with the tool, naming the field.
func Validate(t agentsagatype.ToolSpec) error {
	if !toolName.MatchString(t.Name) {
		return fmt.Errorf("tool %q: name must be 1-64 letters, digits, '_' or '-'", t.Name)
	}
	if l := t.RateLimit; l != nil {
		if l.TokensPerMinute != 0 || l.InputTokensPerMinute != 0 || l.OutputTokensPerMinute != 0 || l.Concurrency != 0 {
			return fmt.Errorf("tool %s: rate_limit: a tool declares requests_per_minute only (tokens and concurrency are a model's)", t.Name)
		}
		if err := l.Validate(); err != nil {
			return fmt.Errorf("tool %s: %w", t.Name, err)
		}
	}
	if t.Kind != agentsagatype.ToolKindMCP && (t.Command != nil || t.Allow != nil || t.MCPTool != "" || t.MCPServer != "") {
		return fmt.Errorf("tool %s: command, allow, mcp_tool and mcp_server are for kind %q, not %q", t.Name, agentsagatype.ToolKindMCP, t.Kind)
	}
	if (t.Recording != nil) != (t.Kind == agentsagatype.ToolKindRecorded) {
		return fmt.Errorf("tool %s: recording is for kind %q, and kind %q needs one", t.Name, agentsagatype.ToolKindRecorded, agentsagatype.ToolKindRecorded)
	}
	switch t.Kind {
	case agentsagatype.ToolKindRecorded:
		if err := validateRecorded(t); err != nil {
			return err
		}
	case agentsagatype.ToolKindMCP:
		if err := validateMCP(t); err != nil {
			return err
		}
	case agentsagatype.ToolKindGo, agentsagatype.ToolKindAgent:
		if t.URL != "" {
			return fmt.Errorf("tool %s: url is set but kind is %q (want kind %q)", t.Name, t.Kind, agentsagatype.ToolKindHTTP)
		}
	case agentsagatype.ToolKindHTTP:
		if t.URL == "" {
			return fmt.Errorf("tool %s: an http tool needs a url", t.Name)
		}
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("tool %s: url %q is not an absolute http(s) URL", t.Name, t.URL)
		}
		switch t.Method {
		case "", http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			return fmt.Errorf("tool %s: method %q is not one of GET, POST, PUT, PATCH, DELETE", t.Name, t.Method)
		}
	case "":
		return fmt.Errorf("tool %s: kind is missing (want %q, %q, %q or %q)", t.Name, agentsagatype.ToolKindGo, agentsagatype.ToolKindHTTP, agentsagatype.ToolKindMCP, agentsagatype.ToolKindAgent)
	default:
		return fmt.Errorf("tool %s: unknown kind %q (want %q, %q, %q, %q or %q)", t.Name, t.Kind, agentsagatype.ToolKindRecorded, agentsagatype.ToolKindGo, agentsagatype.ToolKindHTTP, agentsagatype.ToolKindMCP, agentsagatype.ToolKindAgent)
	}
	if t.TimeoutSeconds < 0 {
		return fmt.Errorf("tool %s: timeout_seconds %v is negative", t.Name, t.TimeoutSeconds)
	}
	if err := validateHeaders(t); err != nil {
		return err
	}
	if _, err := schema(t); err != nil {
		return err
	}
	if _, err := Refusals(t); err != nil {
		return err
	}
	if _, err := CompileGates(t); err != nil {
		return err
	}
	if t.ReadOnly && (t.Irreversible || t.Compensate != nil) {
		// A tool that only reads has nothing to undo and nothing that
		// cannot be undone: one of the two declarations is a mistake.
		return fmt.Errorf("tool %s: declares read_only with %s; a tool that only reads changes nothing to undo", t.Name, readOnlyConflict(t))
	}
	if t.Compensate != nil {
		if t.Irreversible {
			return fmt.Errorf("tool %s: declares both compensate and irreversible", t.Name)
		}
		if t.Compensate.Tool == "" {
			return fmt.Errorf("tool %s: compensate.tool is missing", t.Name)
		}
		var object map[string]any
		if len(t.Compensate.Arguments) > 0 && json.Unmarshal(t.Compensate.Arguments, &object) != nil {
			return fmt.Errorf("tool %s: compensate.arguments must be a JSON object", t.Name)
		}
	}
	return nil
}

// readOnlyConflict names what a read-only tool declares that only a tool
// with an effect may.
func readOnlyConflict(t agentsagatype.ToolSpec) string {
	if t.Irreversible {
		return "irreversible"
	}
	return "compensate"
}

var refusalCache sync.Map // tool name + rules -> *refusal.Matcher

// Refusals compiles the tool's refusal rules once per worker.
func Refusals(t agentsagatype.ToolSpec) (*refusal.Matcher, error) {
	if len(t.Refusal) == 0 {
		return nil, nil
	}
	cacheKey := fmt.Sprintf("%s%+v", t.Name, t.Refusal)
	if cached, ok := refusalCache.Load(cacheKey); ok {
		return cached.(*refusal.Matcher), nil
	}
	matcher, err := refusal.Rules(t.Refusal).Compile()
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	refusalCache.Store(cacheKey, matcher)
	return matcher, nil
}

var schemaCache sync.Map // string(schema) -> *jsonschema.Schema

func schema(t agentsagatype.ToolSpec) (*jsonschema.Schema, error) {
	if len(t.Parameters) == 0 {
		return nil, nil
	}
	if cached, ok := schemaCache.Load(string(t.Parameters)); ok {
		return cached.(*jsonschema.Schema), nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Parameters))
	if err != nil {
		return nil, fmt.Errorf("tool %s: parameters is not JSON: %w", t.Name, err)
	}
	compiler := jsonschema.NewCompiler()
	if err := compiler.AddResource("tool.json", doc); err != nil {
		return nil, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
	}
	compiled, err := compiler.Compile("tool.json")
	if err != nil {
		return nil, fmt.Errorf("tool %s: parameters is not a valid JSON schema: %w", t.Name, err)
	}
	schemaCache.Store(string(t.Parameters), compiled)
	return compiled, nil
}

// CheckArguments reports whether arguments is a JSON object that matches
// the tool's schema, and says what is wrong when it is not.
func CheckArguments(t agentsagatype.ToolSpec, arguments string) error {
	if !json.Valid([]byte(arguments)) {
		return fmt.Errorf("tool %s: arguments are not valid JSON: %s", t.Name, textclip.Clip(arguments, 200))
	}
	schema, err := schema(t)
	if err != nil || schema == nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(arguments))
	if err != nil {
		return fmt.Errorf("tool %s: arguments: %w", t.Name, err)
	}
	if err := schema.Validate(inst); err != nil {
		return fmt.Errorf("tool %s: arguments do not match its schema: %w", t.Name, err)
	}
	return nil
}

// validateMCP checks the fields of a kind mcp tool: a server entry, or one
// tool of a server (mcp_tool set).
func validateMCP(t agentsagatype.ToolSpec) error {
	switch {
	case t.URL != "" && t.Command != nil:
		return fmt.Errorf("tool %s: an mcp tool takes url (streamable HTTP) or command (stdio), not both", t.Name)
	case t.URL == "" && t.Command == nil:
		return fmt.Errorf("tool %s: an mcp tool needs url (streamable HTTP) or command (stdio, [program, args...])", t.Name)
	case t.URL != "":
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("tool %s: url %q is not an absolute http(s) URL", t.Name, t.URL)
		}
	case len(t.Command) == 0:
		return fmt.Errorf("tool %s: command is empty (want [program, args...])", t.Name)
	case t.Command[0] == "":
		return fmt.Errorf("tool %s: command[0], the program, is empty", t.Name)
	}
	if t.Method != "" {
		return fmt.Errorf("tool %s: method is for kind http; an mcp call is a JSON-RPC request", t.Name)
	}
	if t.MCPTool == "" {
		switch {
		case t.MCPServer != "":
			return fmt.Errorf("tool %s: mcp_server is set without mcp_tool", t.Name)
		case len(t.Parameters) > 0:
			return fmt.Errorf("tool %s: parameters come from the MCP server's inputSchema; a server entry declares none", t.Name)
		case t.Compensate != nil:
			return fmt.Errorf("tool %s: compensate cannot apply to every tool of an MCP server (name one with mcp_tool)", t.Name)
		}
	} else if t.Allow != nil {
		return fmt.Errorf("tool %s: allow is for a server entry; mcp_tool already names one tool", t.Name)
	}
	if t.Allow != nil && len(t.Allow) == 0 {
		return fmt.Errorf("tool %s: allow is empty (omit it to allow every tool of the server)", t.Name)
	}
	for i, name := range t.Allow {
		if name == "" {
			return fmt.Errorf("tool %s: allow[%d] is empty", t.Name, i)
		}
		if slices.Index(t.Allow, name) != i {
			return fmt.Errorf("tool %s: allow names %q twice", t.Name, name)
		}
	}
	return nil
}

// EnvRef is one reference to the worker's environment in a header value.
var EnvRef = regexp.MustCompile(`\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}`)

// reservedHeaders are the headers agentsaga sets on every request: a spec
// that overrode them would break deduplication by key or the body's type.
var reservedHeaders = []string{"Idempotency-Key", "Content-Type", "Agentsaga-Attempt", "Request-Timeout"}

// validateHeaders checks the header templates: names are HTTP tokens and
// not agentsaga's own headers, values carry no control characters, and
// every "${" begins a well-formed ${env:NAME}.
func validateHeaders(t agentsagatype.ToolSpec) error {
	if len(t.Headers) == 0 {
		return nil
	}
	if t.Kind != agentsagatype.ToolKindHTTP {
		return fmt.Errorf("tool %s: headers are for kind %q, not %q", t.Name, agentsagatype.ToolKindHTTP, t.Kind)
	}
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(t.Headers)) {
		field := fmt.Sprintf("tool %s: headers.%s", t.Name, name)
		if !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("%s: %q is not a valid HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)", field, name)
		}
		canonical := textproto.CanonicalMIMEHeaderKey(name)
		if slices.Contains(reservedHeaders, canonical) {
			return fmt.Errorf("%s: %s is set by agentsaga on every request and may not be overridden", field, canonical)
		}
		if other, dup := seen[canonical]; dup {
			return fmt.Errorf("%s: names the same header as headers.%s", field, other)
		}
		seen[canonical] = name
		value := t.Headers[name]
		// The value is not quoted: a literal secret would be in the spec,
		// but need not be in every error about it as well.
		if strings.Contains(EnvRef.ReplaceAllString(value, ""), "${") {
			return fmt.Errorf("%s: malformed environment reference: write ${env:NAME}, NAME of letters, digits and '_', not starting with a digit", field)
		}
		if !httpguts.ValidHeaderFieldValue(value) {
			return fmt.Errorf("%s: the value holds a control character (CR, LF, NUL, ...)", field)
		}
	}
	return nil
}

// validateRecorded checks a recorded tool: it names its recording, and
// holds nothing a call could be sent through, so that a replay cannot
// reach the world by construction.
func validateRecorded(t agentsagatype.ToolSpec) error {
	r := t.Recording
	switch {
	case r.Source == "" || r.Replay == "":
		return fmt.Errorf("tool %s: recording.source and recording.replay are required", t.Name)
	case r.Match != agentsagatype.MatchInOrder && r.Match != agentsagatype.MatchAnyOrder:
		return fmt.Errorf("tool %s: recording.match %q is not %q or %q", t.Name, r.Match, agentsagatype.MatchInOrder, agentsagatype.MatchAnyOrder)
	case t.URL != "" || t.Method != "" || len(t.Headers) > 0:
		return fmt.Errorf("tool %s: a recorded tool has no url, method or headers: its calls are answered from the ledger", t.Name)
	case t.Compensate != nil:
		return fmt.Errorf("tool %s: a recorded tool has no compensation: a replay changes nothing to undo", t.Name)
	}
	return nil
}
