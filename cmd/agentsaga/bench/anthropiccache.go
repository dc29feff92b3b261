package bench

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/budget"
)

// The Messages API's documented prompt-caching rules, as the loopback
// server enforces them (docs.claude.com, "Prompt caching" and "Extended
// thinking"). Token counts are estimated, not tokenized: a block's
// canonical JSON (keys sorted, cache_control left out) is len/4 tokens.
const (
	// CacheMaxBreakpoints is how many blocks of a request may carry
	// cache_control; more is a 400.
	CacheMaxBreakpoints = 4
	// CacheMinTokens is the shortest prefix the cache keeps (Claude
	// Sonnet and Opus; Haiku's is 2,048): a shorter one is neither read
	// nor written.
	CacheMinTokens = 1024
	// CacheLookback is how many block boundaries before a breakpoint the
	// API looks at for an earlier cache entry ("about 20 blocks").
	CacheLookback = 20
	// CacheTTL is how long an entry lives unused; a read refreshes it.
	CacheTTL = 5 * time.Minute
	// bytesPerToken is the estimate: a token is four bytes of JSON.
	bytesPerToken = 4
	// minThinkingBudget is the least budget_tokens the API accepts.
	minThinkingBudget = 1024
)

// AnthropicCache is a Messages-API-compatible server on loopback (POST
// /v1/messages, streamed as the API streams, or whole) that enforces
// the API's documented rules on cache breakpoints and extended thinking,
// caches prompt prefixes as documented, bills each request's input as
// read from the cache, written to it, or neither, and counts what it
// billed. It answers as a scripted tool-using agent: for turn k < Turns it
// thinks (a thinking block whose signature it made), says a line and
// calls Tool with one passage to count; at turn Turns it answers. The
// turn is the number of tool results in the request, plus one, so a
// retried request gets the same turn.
type AnthropicCache struct {
	turns int
	tool  string
	// OnRequest, when set, is called with the turn of each request the
	// server accepted, before its reply is written (the bench reads the
	// ledger's spend holds then). Set it before the first request.
	OnRequest func(turn int)
	// now is the clock of cache expiry (tests move it).
	now func() time.Time

	key []byte
	loopback

	mu       sync.Mutex
	cache    map[[32]byte]time.Time // prefix hash -> when the entry expires
	issued   map[string][]issuedThinking
	seq      int
	totals   CacheTotals
	requests []CacheRequest
}

// issuedThinking is a thinking block as the server sent it.
type issuedThinking struct{ thinking, signature string }

// CacheTotals is what the server billed, over the requests it accepted.
// InputTokens is the API's input_tokens: input neither read from nor
// written to the cache.
type CacheTotals struct {
	Requests         int   `json:"requests"`
	Rejected         int   `json:"rejected"`
	InputTokens      int64 `json:"input_tokens"`
	CacheReadTokens  int64 `json:"cache_read_input_tokens"`
	CacheWriteTokens int64 `json:"cache_creation_input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
}

// AllInput is every input token billed: plain, read and written.
func (t CacheTotals) AllInput() int64 { return t.InputTokens + t.CacheReadTokens + t.CacheWriteTokens }

// USD is what the server billed at price.
func (t CacheTotals) USD(price budget.ModelPrice) float64 {
	return t.InputUSD(price) + float64(t.OutputTokens)*price.OutputPerMillion/1e6
}

// InputUSD is what the server billed for input at price.
func (t CacheTotals) InputUSD(price budget.ModelPrice) float64 {
	cached := price.CachedInputPerMillion
	if cached <= 0 {
		cached = price.InputPerMillion
	}
	return (float64(t.InputTokens)*price.InputPerMillion + float64(t.CacheReadTokens)*cached +
		float64(t.CacheWriteTokens)*price.CacheWritePerMillion) / 1e6
}

// CacheRequest is one request as the server saw it.
type CacheRequest struct {
	Turn   int `json:"turn"`
	Status int `json:"status"`
	// Error is the message of a 400.
	Error       string `json:"error,omitempty"`
	Breakpoints int    `json:"breakpoints"`
	// PromptTokens is the whole prompt's estimate; the rest is its bill.
	PromptTokens     int64 `json:"prompt_tokens"`
	InputTokens      int64 `json:"input_tokens"`
	CacheReadTokens  int64 `json:"cache_read_input_tokens"`
	CacheWriteTokens int64 `json:"cache_creation_input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
}

// NewAnthropicCache makes the server's handler without listening (tests
// drive it with httptest); StartAnthropicCache also serves it.
func NewAnthropicCache(turns int, tool string) *AnthropicCache {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &AnthropicCache{turns: turns, tool: tool, now: time.Now, key: key,
		cache: map[[32]byte]time.Time{}, issued: map[string][]issuedThinking{}}
}

// StartAnthropicCache serves a new AnthropicCache on a loopback port.
func StartAnthropicCache(turns int, tool string) (*AnthropicCache, error) {
	s := NewAnthropicCache(turns, tool)
	if err := s.serve("127.0.0.1:0", s); err != nil {
		return nil, fmt.Errorf("bench: anthropic cache server: %w", err)
	}
	return s, nil
}

// Totals is what the server has billed so far.
func (s *AnthropicCache) Totals() CacheTotals {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totals
}

// Requests is every request so far, accepted or not.
func (s *AnthropicCache) Requests() []CacheRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// messagesRequest is the part of a messages request the server reads.
type messagesRequest struct {
	Model     string            `json:"model"`
	MaxTokens int64             `json:"max_tokens"`
	Stream    bool              `json:"stream"`
	System    json.RawMessage   `json:"system"`
	Tools     []json.RawMessage `json:"tools"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Thinking *struct {
		Type         string `json:"type"`
		BudgetTokens int64  `json:"budget_tokens"`
	} `json:"thinking"`
}

// promptBlock is one block of the prompt in the cache's order (tools,
// system, messages), with what the cache needs of it.
type promptBlock struct {
	path       string // where it is, as the API's errors name it
	message    int    // its message, -1 for tools and system
	role       string
	kind       string // its type
	raw        map[string]any
	breakpoint bool
	// hash is of the prompt up to and including this block; tokens the
	// estimate of that prefix.
	hash   [32]byte
	tokens int64
}

// apiError is a 400 in the API's error shape.
type apiError struct{ message string }

func (e *apiError) Error() string { return e.message }

func invalid(format string, args ...any) *apiError {
	return &apiError{message: fmt.Sprintf(format, args...)}
}

func (s *AnthropicCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/v1/messages") {
		writeAPIError(w, http.StatusNotFound, "not_found_error", "only POST /v1/messages is served")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, "invalid_request_error", "could not read the body")
		return
	}
	reply, turn, err := s.answer(body)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if s.OnRequest != nil {
		s.OnRequest(turn)
	}
	_ = agentsagatest.WriteReply(w, body, reply)
}

func writeAPIError(w http.ResponseWriter, status int, kind, message string) {
	body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": message}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// answer validates a request, bills it and builds its reply (a whole
// message's JSON), or says why the API would refuse it.
func (s *AnthropicCache) answer(body []byte) ([]byte, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	record := CacheRequest{Status: http.StatusBadRequest}
	defer func() { s.requests = append(s.requests, record) }()
	fail := func(err error) ([]byte, int, error) {
		record.Error = err.Error()
		s.totals.Rejected++
		return nil, 0, err
	}
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return fail(invalid("the body is not a messages request: %v", err))
	}
	if req.Model == "" {
		return fail(invalid("model: Field required"))
	}
	if req.MaxTokens < 1 {
		return fail(invalid("max_tokens: Field required"))
	}
	if len(req.Messages) == 0 {
		return fail(invalid("messages: at least one message is required"))
	}
	thinking := req.Thinking != nil && req.Thinking.Type == "enabled"
	if thinking {
		if req.Thinking.BudgetTokens < minThinkingBudget {
			return fail(invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to %d", minThinkingBudget))
		}
		if req.MaxTokens <= req.Thinking.BudgetTokens {
			return fail(invalid("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at " +
				"https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"))
		}
	}
	blocks, err := promptBlocks(req)
	if err != nil {
		return fail(err)
	}
	breakpoints := 0
	for _, b := range blocks {
		n := cacheControls(b.raw)
		if n > 0 && (b.kind == "thinking" || b.kind == "redacted_thinking") {
			return fail(invalid("%s.cache_control: a %s block cannot be marked for caching", b.path, b.kind))
		}
		breakpoints += n
	}
	record.Breakpoints = breakpoints
	if breakpoints > CacheMaxBreakpoints {
		return fail(invalid("A maximum of %d blocks with cache_control may be provided. Found %d.", CacheMaxBreakpoints, breakpoints))
	}
	if err := s.checkThinking(req, blocks, thinking); err != nil {
		return fail(err)
	}

	s.hashPrefixes(req, blocks)
	usage := s.bill(blocks)
	turn := 1
	for _, b := range blocks {
		if b.kind == "tool_result" {
			turn++
		}
	}
	reply, output := s.reply(req.Model, turn, len(req.Tools) > 0, thinking)
	usage.OutputTokens = output
	record.Turn, record.Status = turn, http.StatusOK
	record.PromptTokens = usage.InputTokens + usage.CacheReadTokens + usage.CacheWriteTokens
	record.InputTokens, record.CacheReadTokens, record.CacheWriteTokens, record.OutputTokens =
		usage.InputTokens, usage.CacheReadTokens, usage.CacheWriteTokens, usage.OutputTokens
	s.totals.Requests++
	s.totals.InputTokens += usage.InputTokens
	s.totals.CacheReadTokens += usage.CacheReadTokens
	s.totals.CacheWriteTokens += usage.CacheWriteTokens
	s.totals.OutputTokens += usage.OutputTokens
	reply["usage"] = map[string]int64{"input_tokens": usage.InputTokens, "cache_creation_input_tokens": usage.CacheWriteTokens,
		"cache_read_input_tokens": usage.CacheReadTokens, "output_tokens": usage.OutputTokens}
	data, err := json.Marshal(reply)
	if err != nil {
		return fail(invalid("reply: %v", err))
	}
	return data, turn, nil
}

// promptBlocks lists the prompt's blocks in the cache's order: each tool,
// each system block (a string is one text block), each content block of
// each message (a string is one text block).
func promptBlocks(req messagesRequest) ([]promptBlock, error) {
	var blocks []promptBlock
	for i, raw := range req.Tools {
		var tool map[string]any
		if err := json.Unmarshal(raw, &tool); err != nil {
			return nil, invalid("tools.%d: not an object", i)
		}
		blocks = append(blocks, promptBlock{path: fmt.Sprintf("tools.%d", i), message: -1, kind: "tool", raw: tool})
	}
	system, err := contentBlocks(req.System, "system")
	if err != nil {
		return nil, err
	}
	for i, b := range system {
		blocks = append(blocks, promptBlock{path: fmt.Sprintf("system.%d", i), message: -1, kind: "text", raw: b})
	}
	for m, msg := range req.Messages {
		if msg.Role != "user" && msg.Role != "assistant" {
			return nil, invalid("messages.%d.role: Input should be 'user' or 'assistant'", m)
		}
		content, err := contentBlocks(msg.Content, fmt.Sprintf("messages.%d.content", m))
		if err != nil {
			return nil, err
		}
		if len(content) == 0 {
			return nil, invalid("messages.%d: all messages must have non-empty content", m)
		}
		for i, b := range content {
			kind, _ := b["type"].(string)
			blocks = append(blocks, promptBlock{path: fmt.Sprintf("messages.%d.content.%d", m, i), message: m, role: msg.Role, kind: kind, raw: b})
		}
	}
	for i := range blocks {
		blocks[i].breakpoint = cacheControls(blocks[i].raw) > 0
	}
	return blocks, nil
}

// contentBlocks reads content that is a string (one text block), a list
// of blocks, or absent.
func contentBlocks(raw json.RawMessage, path string) ([]map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, nil
		}
		return []map[string]any{{"type": "text", "text": text}}, nil
	}
	var blocks []map[string]any
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, invalid("%s: Input should be a valid string or list of blocks", path)
	}
	for i, b := range blocks {
		if _, ok := b["type"].(string); !ok {
			return nil, invalid("%s.%d.type: Field required", path, i)
		}
	}
	return blocks, nil
}

// cacheControls counts the cache_control markers of a block: its own,
// and those of the blocks inside a tool_result's content.
func cacheControls(block map[string]any) int {
	n := 0
	if cc, ok := block["cache_control"]; ok && cc != nil {
		n++
	}
	if inner, ok := block["content"].([]any); ok {
		for _, b := range inner {
			if m, ok := b.(map[string]any); ok {
				if cc, ok := m["cache_control"]; ok && cc != nil {
					n++
				}
			}
		}
	}
	return n
}

// canonical is a block's JSON with its cache_control markers left out
// and its keys sorted: what the cache hashes, whatever marks it.
func canonical(block map[string]any) []byte {
	clean := make(map[string]any, len(block))
	for k, v := range block {
		if k == "cache_control" {
			continue
		}
		if inner, ok := v.([]any); ok && k == "content" {
			list := make([]any, len(inner))
			for i, b := range inner {
				if m, ok := b.(map[string]any); ok {
					c := make(map[string]any, len(m))
					for k2, v2 := range m {
						if k2 != "cache_control" {
							c[k2] = v2
						}
					}
					b = c
				}
				list[i] = b
			}
			v = list
		}
		clean[k] = v
	}
	data, _ := json.Marshal(clean) // map keys are sorted
	return data
}

// hashPrefixes gives each block the hash and the token estimate of the
// prompt up to and including it. The model scopes every entry; the
// thinking settings scope the messages' entries (changing them
// invalidates the messages' cache, not the tools' and system's), and each
// message block is hashed with its message's index and role.
func (s *AnthropicCache) hashPrefixes(req messagesRequest, blocks []promptBlock) {
	h := sha256.Sum256([]byte("model\x00" + req.Model))
	var size int64
	for i := range blocks {
		b := &blocks[i]
		d := sha256.New()
		d.Write(h[:])
		if b.message == 0 && (i == 0 || blocks[i-1].message != 0) {
			thinking, _ := json.Marshal(req.Thinking)
			d.Write([]byte("thinking\x00"))
			d.Write(thinking)
		}
		label := b.path
		if b.message >= 0 {
			label = fmt.Sprintf("messages.%d.%s", b.message, b.role)
		} else if strings.HasPrefix(b.path, "tools.") {
			label = "tools"
		} else {
			label = "system"
		}
		d.Write([]byte(label + "\x00"))
		c := canonical(b.raw)
		d.Write(c)
		copy(h[:], d.Sum(nil))
		size += int64(len(c))
		b.hash, b.tokens = h, size/bytesPerToken
	}
}

// billed is one request's input, as the API reports it.
type billed struct{ InputTokens, CacheReadTokens, CacheWriteTokens, OutputTokens int64 }

// bill applies the cache to a request. From each breakpoint it looks back
// CacheLookback blocks for the longest prefix in the cache; that is read.
// From there to the last breakpoint is written: an entry at each
// breakpoint past the read, if its prefix is at least CacheMinTokens. The
// rest of the prompt is plain input. A read refreshes the entries it used.
func (s *AnthropicCache) bill(blocks []promptBlock) billed {
	now := s.now()
	for h, expires := range s.cache {
		if !now.Before(expires) {
			delete(s.cache, h)
		}
	}
	var total int64
	if n := len(blocks); n > 0 {
		total = blocks[n-1].tokens
	}
	read, last := -1, -1
	for i, b := range blocks {
		if !b.breakpoint {
			continue
		}
		last = i
		for j := i; j >= 0 && j >= i-CacheLookback; j-- {
			if _, ok := s.cache[blocks[j].hash]; ok && blocks[j].tokens >= CacheMinTokens {
				read = max(read, j)
				break
			}
		}
	}
	var u billed
	if read >= 0 {
		u.CacheReadTokens = blocks[read].tokens
		for j := 0; j <= read; j++ {
			if _, ok := s.cache[blocks[j].hash]; ok {
				s.cache[blocks[j].hash] = now.Add(CacheTTL)
			}
		}
	}
	if last > read && blocks[last].tokens >= CacheMinTokens {
		u.CacheWriteTokens = blocks[last].tokens - u.CacheReadTokens
		for j := read + 1; j <= last; j++ {
			if blocks[j].breakpoint && blocks[j].tokens >= CacheMinTokens {
				s.cache[blocks[j].hash] = now.Add(CacheTTL)
			}
		}
	}
	u.InputTokens = max(total-u.CacheReadTokens-u.CacheWriteTokens, 0)
	return u
}

// checkThinking enforces extended thinking's rules on the conversation:
// every thinking block sent back must be one the server issued, unchanged
// (its signature checks), and, with thinking on, the final assistant
// message, when it holds a tool_use, must begin with the thinking blocks
// the server issued with that tool_use.
func (s *AnthropicCache) checkThinking(req messagesRequest, blocks []promptBlock, thinking bool) error {
	for _, b := range blocks {
		switch b.kind {
		case "thinking":
			text, _ := b.raw["thinking"].(string)
			sig, _ := b.raw["signature"].(string)
			if !hmac.Equal([]byte(sig), []byte(s.sign(text))) {
				return invalid("%s: Invalid `signature` in `thinking` block", b.path)
			}
		case "redacted_thinking":
			// The server issues none, so none can come back unchanged.
			return invalid("%s: Invalid `data` in `redacted_thinking` block", b.path)
		}
	}
	if !thinking {
		return nil
	}
	lastAssistant := -1
	for m, msg := range req.Messages {
		if msg.Role == "assistant" {
			lastAssistant = m
		}
	}
	if lastAssistant < 0 {
		return nil
	}
	var content []promptBlock
	for _, b := range blocks {
		if b.message == lastAssistant {
			content = append(content, b)
		}
	}
	var toolUse string
	for _, b := range content {
		if b.kind == "tool_use" {
			toolUse, _ = b.raw["id"].(string)
			break
		}
	}
	if toolUse == "" && !slices.ContainsFunc(content, func(b promptBlock) bool { return b.kind == "tool_use" }) {
		return nil
	}
	if content[0].kind != "thinking" && content[0].kind != "redacted_thinking" {
		return invalid("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
			"When `thinking` is enabled, a final `assistant` message must start with a thinking block "+
			"(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks "+
			"from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "+
			"https://docs.claude.com/en/docs/build-with-claude/extended-thinking", lastAssistant, content[0].kind)
	}
	issued, ok := s.issued[toolUse]
	if !ok {
		return nil // a turn this server did not answer: its signatures checked above
	}
	for i, want := range issued {
		if i >= len(content) || content[i].kind != "thinking" {
			return invalid("messages.%d.content.%d: the thinking blocks of the turn that called %s must be sent back, all and unchanged",
				lastAssistant, i, toolUse)
		}
		text, _ := content[i].raw["thinking"].(string)
		sig, _ := content[i].raw["signature"].(string)
		if text != want.thinking || sig != want.signature {
			return invalid("messages.%d.content.%d: Invalid `signature` in `thinking` block", lastAssistant, i)
		}
	}
	return nil
}

// sign is a thinking block's signature: base64 of an HMAC of its text
// under the server's key.
func (s *AnthropicCache) sign(thinking string) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte("thinking\x00" + thinking))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// reply is turn k's message, without its usage, and its output tokens.
func (s *AnthropicCache) reply(model string, turn int, tools, thinking bool) (map[string]any, int64) {
	s.seq++
	var content []map[string]any
	var issued []issuedThinking
	if thinking {
		text := fmt.Sprintf("Turn %d of %d. Passage %d is next; counting its words with %s keeps the tally exact before I go on.",
			turn, s.turns, turn, s.tool)
		if turn >= s.turns || !tools {
			text = fmt.Sprintf("Turn %d of %d. Every passage is counted; time to report.", turn, s.turns)
		}
		sig := s.sign(text)
		content = append(content, map[string]any{"type": "thinking", "thinking": text, "signature": sig})
		issued = append(issued, issuedThinking{thinking: text, signature: sig})
	}
	stop := "end_turn"
	if turn < s.turns && tools {
		id := fmt.Sprintf("toolu_cache_%03d_%d", turn, s.seq)
		content = append(content,
			map[string]any{"type": "text", "text": fmt.Sprintf("Counting the words of passage %d.", turn)},
			map[string]any{"type": "tool_use", "id": id, "name": s.tool, "input": map[string]any{"text": CachePassage(turn)}})
		s.issued[id] = issued
		stop = "tool_use"
	} else {
		content = append(content, map[string]any{"type": "text", "text": fmt.Sprintf("All %d passages are counted. Done.", max(s.turns-1, 0))})
	}
	out, _ := json.Marshal(content)
	return map[string]any{"id": fmt.Sprintf("msg_cache_%d", s.seq), "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "stop_sequence": nil}, max(int64(len(out))/bytesPerToken, 1)
}

// CachePassage is the text the scripted agent asks the tool to count at
// turn k: a sentence or two, different each turn.
func CachePassage(k int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Passage %d.", k)
	for i := 0; i < 24; i++ {
		b.WriteString(" ")
		b.WriteString(longWords[(k*31+i*7)%len(longWords)])
	}
	b.WriteString(".")
	return b.String()
}
