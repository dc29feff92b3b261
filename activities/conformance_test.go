package activities_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
)

// The conformance corpus (issue 42, item 2): raw provider wire transcripts
// under testdata/wire/<provider>/<case>.txt, written by hand from each
// provider's documents, never by internal/providerwire or any other encoder
// of ours, so the decoders are checked against the providers' reading of
// their wire formats rather than against our own. testdata/wire/README.md
// describes the file format and the expect object.

const wireDir = "testdata/wire"

// wireProviders says which decoder reads each directory of the corpus and
// which document hosts its cases may cite: a case names the provider
// document it follows, never one of ours.
var wireProviders = map[string]struct {
	decoder string // "openai", "anthropic" or "gemini"
	hosts   []string
	// reasoning is the Reasoning.Provider a case's kept reasoning is
	// written in, unless the case says otherwise.
	reasoning string
}{
	"openai":        {"openai", []string{"platform.openai.com", "html.spec.whatwg.org"}, ""},
	"azure":         {"openai", []string{"learn.microsoft.com"}, ""},
	"vllm":          {"openai", []string{"docs.vllm.ai"}, ""},
	"ollama":        {"openai", []string{"github.com/ollama/ollama", "docs.ollama.com"}, ""},
	"llamacpp":      {"openai", []string{"github.com/ggml-org/llama.cpp"}, ""},
	"lmstudio":      {"openai", []string{"lmstudio.ai"}, ""},
	"openrouter":    {"openai", []string{"openrouter.ai"}, ""},
	"gemini-openai": {"openai", []string{"ai.google.dev"}, activities.ReasoningGemini},
	"anthropic":     {"anthropic", []string{"docs.anthropic.com", "docs.claude.com"}, activities.ReasoningAnthropic},
	"gemini":        {"gemini", []string{"ai.google.dev", "cloud.google.com"}, activities.ReasoningGemini},
}

// wireCase is one transcript: its header, then the body bytes verbatim.
type wireCase struct {
	dir, name   string
	source      string
	notes       []string
	status      int
	contentType string
	expectRaw   string
	expect      wireExpect
	body        []byte
}

// wireExpect is what the decoder must make of a transcript (see
// testdata/wire/README.md).
type wireExpect struct {
	Content   *string        `json:"content"`
	ToolCalls []wireToolCall `json:"tool_calls"`
	Refusal   *string        `json:"refusal"`
	Usage     *wireUsage     `json:"usage"`
	Model     string         `json:"model"`
	Error     string         `json:"error"`
	Reasoning bool           `json:"reasoning"`
	Provider  string         `json:"reasoning_provider"`
	Contains  string         `json:"reasoning_contains"`
	Thinking  string         `json:"thinking_text"`
	Reasoned  string         `json:"reasoning_text"`
}

type wireToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireUsage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	CacheWriteTokens  int64 `json:"cache_write_tokens"`
}

// anyText is the expectation "any non-empty text" (an id the decoder
// makes up, a refusal whose wording is the decoder's).
const anyText = "*"

// readWireCase parses one transcript file.
func readWireCase(path string) (wireCase, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return wireCase{}, err
	}
	c := wireCase{dir: filepath.Base(filepath.Dir(path)), name: strings.TrimSuffix(filepath.Base(path), ".txt")}
	head, body, ok := bytes.Cut(raw, []byte("\n\n"))
	if !ok {
		return c, fmt.Errorf("no blank line ends the header")
	}
	c.body = body
	seen := map[string]bool{}
	for _, line := range strings.Split(string(head), "\n") {
		key, value, ok := strings.Cut(line, ": ")
		if !ok {
			return c, fmt.Errorf("header line %q is not \"key: value\"", line)
		}
		if key != "note" && seen[key] {
			return c, fmt.Errorf("header %q given twice", key)
		}
		seen[key] = true
		switch key {
		case "source":
			c.source = value
		case "note":
			c.notes = append(c.notes, value)
		case "status":
			if c.status, err = strconv.Atoi(value); err != nil {
				return c, fmt.Errorf("status %q: %w", value, err)
			}
		case "content-type":
			c.contentType = value
		case "expect":
			c.expectRaw = value
			dec := json.NewDecoder(strings.NewReader(value))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c.expect); err != nil {
				return c, fmt.Errorf("expect: %w", err)
			}
		default:
			return c, fmt.Errorf("unknown header %q", key)
		}
	}
	for _, key := range []string{"source", "status", "content-type", "expect"} {
		if !seen[key] {
			return c, fmt.Errorf("header %q is missing", key)
		}
	}
	return c, nil
}

// readWireDir reads every transcript of root/dir.
func readWireDir(root, dir string) ([]wireCase, error) {
	paths, err := filepath.Glob(filepath.Join(root, dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var cases []wireCase
	for _, path := range paths {
		c, err := readWireCase(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// TestConformanceCorpus checks the corpus itself: every provider directory
// holds cases, every case names the provider document it follows (on that
// provider's own site), its header and expectation are well formed, and its
// body is what its content type says. It also checks that this file does
// not import our encoder, so no case can have been written by it.
func TestConformanceCorpus(t *testing.T) {
	for _, problem := range corpusProblems(wireDir) {
		t.Error(problem)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "conformance_test.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if strings.Contains(imp.Path.Value, "providerwire") {
			t.Errorf("conformance_test.go imports %s: the corpus must not be read or written through our encoder", imp.Path.Value)
		}
	}
}

// TestConformanceCorpusCatches shows corpusProblems finds what it is for:
// an empty or missing provider directory, a case that cites no provider
// document or cites ours, a malformed header or expectation, a slip in an
// event stream's framing.
func TestConformanceCorpusCatches(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(wireDir, "openai", "text.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// corpus is a whole corpus of good cases, with file (under openai/)
	// holding body instead, or, for "", with openai/ left empty.
	corpus := func(t *testing.T, file string, body []byte) string {
		root := t.TempDir()
		for dir, p := range wireProviders {
			if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if dir == "openai" && file == "" {
				continue
			}
			// Any case will do, as long as it cites a host of dir.
			src := bytes.Replace(good, []byte("https://platform.openai.com"), []byte("https://"+p.hosts[0]), 1)
			if err := os.WriteFile(filepath.Join(root, dir, "case.txt"), src, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if file != "" {
			if err := os.WriteFile(filepath.Join(root, "openai", file), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	if problems := corpusProblems(corpus(t, "more.txt", good)); len(problems) > 0 {
		t.Fatalf("a corpus of good cases has problems: %v", problems)
	}
	replace := func(old, new string) []byte {
		if !bytes.Contains(good, []byte(old)) {
			t.Fatalf("openai/text.txt no longer holds %q", old)
		}
		return bytes.Replace(good, []byte(old), []byte(new), 1)
	}
	for name, root := range map[string]string{
		"empty provider directory": corpus(t, "", nil),
		"no source":                corpus(t, "bad.txt", replace("source: ", "note: ")),
		"source on another site":   corpus(t, "bad.txt", replace("https://platform.openai.com", "https://example.com")),
		"source names our encoder": corpus(t, "bad.txt", replace("OpenAI API reference", "written by providerwire.WriteChatCompletion,")),
		"unknown expect field":     corpus(t, "bad.txt", replace(`"error":""}`, `"error":"","finish":"stop"}`)),
		"success without usage":    corpus(t, "bad.txt", replace(`"usage":{"input_tokens":9,"output_tokens":8,"cached_input_tokens":0},`, "")),
		"unknown error kind":       corpus(t, "bad.txt", replace(`"error":""}`, `"error":"maybe"}`)),
		"no blank line after head": corpus(t, "bad.txt", bytes.Replace(good, []byte("\n\n"), []byte("\n"), -1)),
		"data that is not JSON":    corpus(t, "bad.txt", replace(`data: [DONE]`, `data: {"id":`)),
		"not an SSE field":         corpus(t, "bad.txt", replace(`data: [DONE]`, `done: [DONE]`)),
		"stream not ended":         corpus(t, "bad.txt", bytes.TrimRight(good, "\n")),
	} {
		if problems := corpusProblems(root); len(problems) == 0 {
			t.Errorf("%s: corpusProblems found nothing wrong", name)
		}
	}
	root := corpus(t, "more.txt", good)
	if err := os.Mkdir(filepath.Join(root, "mystery"), 0o755); err != nil {
		t.Fatal(err)
	}
	if problems := corpusProblems(root); len(problems) == 0 {
		t.Errorf("a directory no decoder reads: corpusProblems found nothing wrong")
	}
}

// corpusProblems lists what is wrong with the corpus under root.
func corpusProblems(root string) []string {
	var problems []string
	entries, err := os.ReadDir(root)
	if err != nil {
		return []string{err.Error()}
	}
	dirs := map[string]bool{}
	for _, e := range entries {
		switch {
		case e.IsDir():
			if _, ok := wireProviders[e.Name()]; !ok {
				problems = append(problems, fmt.Sprintf("%s/%s: no decoder is known for this directory (add it to wireProviders)", root, e.Name()))
			}
			dirs[e.Name()] = true
		case e.Name() != "README.md":
			problems = append(problems, fmt.Sprintf("%s/%s: only provider directories and README.md belong here", root, e.Name()))
		}
	}
	for dir, p := range wireProviders {
		if !dirs[dir] {
			problems = append(problems, fmt.Sprintf("%s/%s is missing", root, dir))
			continue
		}
		cases, err := readWireDir(root, dir)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if len(cases) == 0 {
			problems = append(problems, fmt.Sprintf("%s/%s holds no cases", root, dir))
		}
		for _, c := range cases {
			problems = append(problems, wireCaseProblems(c, p.hosts)...)
		}
	}
	sort.Strings(problems)
	return problems
}

func wireCaseProblems(c wireCase, hosts []string) []string {
	var problems []string
	where := c.dir + "/" + c.name
	bad := func(format string, args ...any) {
		problems = append(problems, where+": "+fmt.Sprintf(format, args...))
	}
	cited := false
	for _, host := range hosts {
		cited = cited || strings.Contains(c.source, "https://"+host)
	}
	if !cited {
		bad("source %q cites no document of %v", c.source, hosts)
	}
	for _, text := range append([]string{c.source, string(c.body)}, c.notes...) {
		if strings.Contains(strings.ToLower(text), "providerwire") {
			bad("mentions providerwire; a case is written from the provider's document")
		}
	}
	if c.status < 100 || c.status > 599 {
		bad("status %d", c.status)
	}
	if len(bytes.TrimSpace(c.body)) == 0 {
		bad("empty body")
	}
	e := c.expect
	switch e.Error {
	case "":
		if e.Content == nil || e.Usage == nil {
			bad("a case that succeeds must say its content and usage")
		}
	case "retryable", "non-retryable", "protocol":
		if e.Content != nil || e.ToolCalls != nil || e.Refusal != nil || e.Usage != nil || e.Reasoning {
			bad("an error case expects nothing but its error")
		}
	default:
		bad("error %q is none of \"\", retryable, non-retryable, protocol", e.Error)
	}
	if (e.Contains != "" || e.Provider != "") && !e.Reasoning {
		bad("reasoning_contains and reasoning_provider need \"reasoning\":true")
	}
	// A signature comes whole; reasoning text may be split across
	// deltas, so only its start is looked for.
	if e.Contains != "" && !bytes.Contains(c.body, []byte(e.Contains)) {
		bad("the body does not hold %q", e.Contains)
	}
	for _, text := range []string{e.Thinking, e.Reasoned} {
		if start := text[:min(len(text), 16)]; text != "" && !bytes.Contains(c.body, []byte(start)) {
			bad("the body does not hold the start of %q", text)
		}
	}
	mediaType, _, _ := strings.Cut(c.contentType, ";")
	switch strings.TrimSpace(mediaType) {
	case "text/event-stream":
		problems = append(problems, eventStreamProblems(where, c.body)...)
	case "application/json":
		if !json.Valid(c.body) {
			bad("the application/json body is not JSON")
		}
	}
	return problems
}

// eventStreamProblems checks a body line by line as the SSE standard reads
// it: a comment, a field (data, event, id, retry) or a blank line; and
// every data line is JSON or [DONE]. It catches a hand-written slip, not a
// provider's departure: departures are in the JSON, not in the framing.
func eventStreamProblems(where string, body []byte) []string {
	var problems []string
	if !bytes.HasSuffix(body, []byte("\n\n")) && !bytes.HasSuffix(body, []byte("\r\n\r\n")) {
		problems = append(problems, where+": the stream's last event is not ended by a blank line")
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" || strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if value != "[DONE]" && !json.Valid([]byte(value)) {
				problems = append(problems, fmt.Sprintf("%s: line %d: data is not JSON: %s", where, n, value))
			}
		case "event", "id", "retry":
		default:
			problems = append(problems, fmt.Sprintf("%s: line %d: %q is not an SSE field", where, n, field))
		}
	}
	return problems
}

// TestConformance plays every transcript to the decoder its directory
// names, through a server that answers with the transcript's status,
// content type and body bytes verbatim, and compares the turn with the
// case's expectation. Each case is a subtest, so a run lists each case the
// decoder gets wrong.
func TestConformance(t *testing.T) {
	dirs := make([]string, 0, len(wireProviders))
	for dir := range wireProviders {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		p := wireProviders[dir]
		t.Run(dir, func(t *testing.T) {
			cases, err := readWireDir(wireDir, dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					playWireCase(t, p.decoder, p.reasoning, c)
				})
			}
		})
	}
}

func playWireCase(t *testing.T, decoder, reasoningProvider string, c wireCase) {
	wantPath := map[string]string{"openai": "/v1/chat/completions", "anthropic": "/v1/messages",
		"gemini": "/v1beta/models/gemini-2.5-flash:streamGenerateContent"}[decoder]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req struct {
			Stream bool `json:"stream"`
		}
		// Gemini asks for a stream by its URL (alt=sse), the others in the body.
		if r.Method != http.MethodPost || r.URL.Path != wantPath || json.Unmarshal(b, &req) != nil || !(req.Stream || r.URL.Query().Get("alt") == "sse") {
			t.Errorf("the decoder sent %s %s %s; want a streamed POST %s", r.Method, r.URL.Path, b, wantPath)
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", c.contentType)
		w.WriteHeader(c.status)
		_, _ = w.Write(c.body)
	}))
	defer srv.Close()

	var model activities.Model
	var err error
	client := &http.Client{Timeout: 10 * time.Second}
	switch decoder {
	case "openai":
		model, err = activities.NewOpenAIModel(agentsagatype.ModelSpec{
			Provider: agentsagatype.ProviderOpenAI, Name: "conformance-model", BaseURL: srv.URL + "/v1",
		}, "sk-conformance", client)
	case "anthropic":
		model, err = activities.NewAnthropicModel(agentsagatype.ModelSpec{
			Provider: agentsagatype.ProviderAnthropic, Name: "claude-sonnet-4-5", BaseURL: srv.URL,
		}, "sk-ant-conformance", client)
	case "gemini":
		model, err = activities.NewGeminiModel(agentsagatype.ModelSpec{
			Provider: agentsagatype.ProviderGemini, Name: "gemini-2.5-flash", BaseURL: srv.URL,
		}, "gemini-conformance-key", client)
	default:
		t.Fatalf("no decoder %q", decoder)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var streamed strings.Builder
	turn, err := model.Turn(ctx, activities.ModelRequest{
		Messages: []agentsagatype.Message{{Role: "user", Content: "What is the weather in Paris?"}},
		OnText:   func(chunk string) { streamed.WriteString(chunk) },
	})

	var wrong []string
	e := c.expect
	switch e.Error {
	case "retryable", "non-retryable":
		if err != nil {
			if got := activities.Classify(err); got.Retryable != (e.Error == "retryable") {
				wrong = append(wrong, fmt.Sprintf("error: want %s, got retryable=%v (%s): %v", e.Error, got.Retryable, got.ErrType, err))
			}
			break
		}
		wrong = append(wrong, fmt.Sprintf("error: want a %s error, got a turn %+v", e.Error, turn))
	case "protocol":
		if err == nil {
			wrong = append(wrong, fmt.Sprintf("error: want a protocol error, got a turn %+v", turn))
		}
	default:
		if err != nil {
			wrong = append(wrong, fmt.Sprintf("error: want a turn, got (retryable=%v) %v", activities.Classify(err).Retryable, err))
			break
		}
		wrong = append(wrong, compareWireTurn(e, reasoningProvider, turn, streamed.String())...)
	}
	if len(wrong) > 0 {
		t.Errorf("%s/%s (%s):\n  %s", c.dir, c.name, c.source, strings.Join(wrong, "\n  "))
	}
}

// compareWireTurn lists where turn differs from what e expects; streamed
// is what the decoder handed to OnText.
func compareWireTurn(e wireExpect, reasoningProvider string, turn agentsagatype.ModelTurn, streamed string) []string {
	var wrong []string
	if want := *e.Content; turn.Content != want {
		wrong = append(wrong, fmt.Sprintf("content: want %q, got %q", want, turn.Content))
	}
	wantRefusal := ""
	if e.Refusal != nil {
		wantRefusal = *e.Refusal
	}
	switch {
	case wantRefusal == anyText && turn.Refusal == "":
		wrong = append(wrong, "refusal: want a refusal, got none")
	case wantRefusal != anyText && turn.Refusal != wantRefusal:
		wrong = append(wrong, fmt.Sprintf("refusal: want %q, got %q", wantRefusal, turn.Refusal))
	}
	if wantRefusal == "" && streamed != turn.Content {
		wrong = append(wrong, fmt.Sprintf("OnText: the streamed text %q does not add up to the content %q", streamed, turn.Content))
	}
	if len(turn.ToolCalls) != len(e.ToolCalls) {
		wrong = append(wrong, fmt.Sprintf("tool_calls: want %d, got %d: %+v", len(e.ToolCalls), len(turn.ToolCalls), turn.ToolCalls))
	} else {
		for i, want := range e.ToolCalls {
			got := turn.ToolCalls[i]
			if (want.ID == anyText && got.ID == "") || (want.ID != anyText && got.ID != want.ID) {
				wrong = append(wrong, fmt.Sprintf("tool_calls[%d].id: want %q, got %q", i, want.ID, got.ID))
			}
			if got.Name != want.Name {
				wrong = append(wrong, fmt.Sprintf("tool_calls[%d].name: want %q, got %q", i, want.Name, got.Name))
			}
			if !sameArguments(want.Arguments, got.Arguments) {
				wrong = append(wrong, fmt.Sprintf("tool_calls[%d].arguments: want %s, got %s", i, want.Arguments, got.Arguments))
			}
		}
	}
	gotUsage := wireUsage{turn.Usage.InputTokens, turn.Usage.OutputTokens, turn.Usage.CachedInputTokens, turn.Usage.CacheWriteTokens}
	if gotUsage != *e.Usage {
		wrong = append(wrong, fmt.Sprintf("usage: want %+v, got %+v", *e.Usage, gotUsage))
	}
	if e.Model != "" && turn.Model != e.Model {
		wrong = append(wrong, fmt.Sprintf("model: want %q, got %q", e.Model, turn.Model))
	}
	if e.Reasoning {
		provider := e.Provider
		if provider == "" {
			provider = reasoningProvider
		}
		switch r := turn.Reasoning; {
		case r == nil:
			wrong = append(wrong, fmt.Sprintf("reasoning: want the provider's reasoning kept (%s), got none", provider))
		case r.Provider != provider:
			wrong = append(wrong, fmt.Sprintf("reasoning: want provider %q, got %q", provider, r.Provider))
		case !json.Valid(r.Data):
			wrong = append(wrong, fmt.Sprintf("reasoning: data is not JSON: %s", r.Data))
		default:
			for _, text := range []string{e.Contains, e.Thinking} {
				if text != "" && !jsonHolds(r.Data, text) {
					wrong = append(wrong, fmt.Sprintf("reasoning: data does not hold %q verbatim: %s", text, r.Data))
				}
			}
		}
	}
	for _, text := range []string{e.Thinking, e.Reasoned} {
		if text == "" {
			continue
		}
		if strings.Contains(turn.Content, text) {
			wrong = append(wrong, fmt.Sprintf("content: holds the reasoning %q, which is not the answer", text))
		}
		if strings.Contains(streamed, text) {
			wrong = append(wrong, fmt.Sprintf("OnText: streamed the reasoning %q as answer text", text))
		}
	}
	return wrong
}

// sameArguments compares a tool call's arguments: as JSON values when the
// expected arguments are JSON (a provider that sends an object, such as
// Gemini or Anthropic, leaves the text to the decoder), exactly otherwise.
func sameArguments(want, got string) bool {
	if want == got {
		return true
	}
	var w, g any
	if json.Unmarshal([]byte(want), &w) != nil || json.Unmarshal([]byte(got), &g) != nil {
		return false
	}
	return reflect.DeepEqual(w, g)
}

// jsonHolds says whether text is in data, either as written or inside one
// of its strings once decoded (the decoder may re-encode what it keeps).
func jsonHolds(data json.RawMessage, text string) bool {
	if bytes.Contains(data, []byte(text)) {
		return true
	}
	var v any
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case string:
			return strings.Contains(v, text)
		case []any:
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		case map[string]any:
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}
