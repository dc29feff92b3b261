package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatest"
)

// The rate-limit scenario needs a provider that limits an account the way
// OpenAI does, on loopback, so that every contender meets the same quota
// and the quota, not a real provider's mood, decides the figures. Its
// limits, headers, 429s and error bodies follow OpenAI's (real names and
// value formats), and its replies are what openai-go/v3 parses.

// ProviderConfig is the fake provider's quota and replies.
type ProviderConfig struct {
	// RequestsPerMinute and TokensPerMinute limit each API key (the
	// Authorization bearer token) as continuously refilled token buckets:
	// capacity the per-minute limit, refilled at limit/60 a second. Zero
	// means not limited.
	RequestsPerMinute int64 `json:"requests_per_minute"`
	TokensPerMinute   int64 `json:"tokens_per_minute"`
	// Turns is a run's length: the model answers turns 1..Turns-1 with one
	// call of Tool and turn Turns with its final text. The turn is read
	// from the request (its tool results), so a retried request gets the
	// same answer.
	Turns int    `json:"turns"`
	Tool  string `json:"tool"`
	// CompletionTokens is what a reply says it used, at most the request's
	// max tokens.
	CompletionTokens int64 `json:"completion_tokens"`
	// providerLatency is the time an answered request takes; a 429 is
	// answered at once.
	providerLatency
}

// ProviderCounts is what the provider counted for one API key.
type ProviderCounts struct {
	Requests int64 `json:"requests"`
	Answered int64 `json:"answered"`
	// RateLimited are the requests answered 429, by the limit that
	// refused them (OpenAI's error type).
	RateLimited      int64 `json:"rate_limited"`
	RateLimitedByRPM int64 `json:"rate_limited_requests"`
	RateLimitedByTPM int64 `json:"rate_limited_tokens"`
	OtherErrors      int64 `json:"other_errors"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// TokensAdmitted is what the key's token bucket kept for the answered
	// requests: their prompts and completions (the unused part of a
	// request's max tokens is given back as its reply is sent).
	TokensAdmitted int64 `json:"tokens_admitted"`
	// First is when the first request arrived, Last when the last answered
	// reply was sent.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Refusals are the first maxRefusalsKept 429s, as evidence of what a
	// client sent into a closed window.
	Refusals []ProviderRefusal `json:"refusals,omitempty"`
}

// ProviderRefusal is one 429: when, by which limit, what the request
// asked for and what the bucket held.
type ProviderRefusal struct {
	At        time.Time `json:"at"`
	Type      string    `json:"type"`
	Requested int64     `json:"requested_tokens"`
	Requests  float64   `json:"requests_left"`
	Tokens    float64   `json:"tokens_left"`
}

// maxRefusalsKept bounds ProviderCounts.Refusals.
const maxRefusalsKept = 20

// Share429 is the share of requests answered 429.
func (c ProviderCounts) Share429() float64 {
	if c.Requests == 0 {
		return 0
	}
	return float64(c.RateLimited) / float64(c.Requests)
}

// RateLimitProvider is an OpenAI-compatible chat.completions server on
// loopback that enforces ProviderConfig's limits per API key. It streams a
// reply to a request that asks (the engine's), and sends it whole to one
// that does not (the baselines').
type RateLimitProvider struct {
	cfg ProviderConfig
	loopback
	now func() time.Time

	mu     sync.Mutex
	keys   map[string]*providerKey
	random *rand.Rand
	serial int64
}

// providerKey is one API key's buckets and counts, and the name GET
// /_counts shows in place of the key.
type providerKey struct {
	requests, tokens float64
	at               time.Time
	counts           ProviderCounts
	name             string
}

// StartRateLimitProvider serves cfg on a free loopback port.
func StartRateLimitProvider(cfg ProviderConfig) (*RateLimitProvider, error) {
	return ServeRateLimitProvider("127.0.0.1:0", cfg)
}

// ServeRateLimitProvider serves cfg at addr.
func ServeRateLimitProvider(addr string, cfg ProviderConfig) (*RateLimitProvider, error) {
	if cfg.RequestsPerMinute < 0 || cfg.TokensPerMinute < 0 || cfg.Turns < 1 || cfg.CompletionTokens < 0 ||
		!cfg.ordered() || cfg.Tool == "" {
		return nil, fmt.Errorf("bench: rate-limit provider: limits %d RPM and %d TPM must not be negative, turns %d positive, completion tokens %d not negative, latency %v-%v ordered, and a tool named (%q)",
			cfg.RequestsPerMinute, cfg.TokensPerMinute, cfg.Turns, cfg.CompletionTokens, cfg.LatencyMin, cfg.LatencyMax, cfg.Tool)
	}
	p := &RateLimitProvider{cfg: cfg, now: time.Now, keys: map[string]*providerKey{},
		random: rand.New(rand.NewPCG(1, 2))}
	if err := p.serve(addr, p); err != nil {
		return nil, fmt.Errorf("bench: rate-limit provider: listen on %s: %w", addr, err)
	}
	return p, nil
}

// URL is the base URL a client is given: the server's root + "/v1".
func (p *RateLimitProvider) URL() string { return p.loopback.URL() + "/v1" }

// Counts is what the provider counted for apiKey.
func (p *RateLimitProvider) Counts(apiKey string) ProviderCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.keys[apiKey]; ok {
		c := k.counts
		c.Refusals = slices.Clone(c.Refusals)
		return c
	}
	return ProviderCounts{}
}

// AllCounts is every key's counts by the key's name (KeyName): what GET
// /_counts serves, so that no key is ever shown.
func (p *RateLimitProvider) AllCounts() map[string]ProviderCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]ProviderCounts, len(p.keys))
	for _, k := range p.keys {
		c := k.counts
		c.Refusals = slices.Clone(c.Refusals)
		out[k.name] = c
	}
	return out
}

// KeyName is how GET /_counts names apiKey: key-1 for the first key the
// provider saw, key-2 for the second, and so on; "" for a key it has not
// seen. The fake names keys itself: it needs no more than to keep them out
// of what it serves.
func (p *RateLimitProvider) KeyName(apiKey string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.keys[apiKey]; ok {
		return k.name
	}
	return ""
}

// ProviderPromptTokens is a request's prompt as the provider counts it: a
// token per four characters of every message's text and tool calls and of
// the tool definitions, and 4 tokens of framing a message. The baselines'
// limiter estimates with the same function, so that it is not worse
// informed than agentsaga.
func ProviderPromptTokens(messages []string, tools []json.RawMessage) int64 {
	chars := 0
	for _, m := range messages {
		chars += len(m)
	}
	for _, t := range tools {
		chars += len(t)
	}
	return int64((chars+3)/4 + 4*len(messages))
}

func (r chatRequest) promptTokens() int64 {
	texts := make([]string, 0, len(r.Messages))
	for _, m := range r.Messages {
		text := contentText(m.Content)
		for _, call := range m.ToolCalls {
			text += call.Function.Name + call.Function.Arguments
		}
		texts = append(texts, text)
	}
	return ProviderPromptTokens(texts, r.Tools)
}

// maxTokens is the request's max_completion_tokens, else max_tokens, else
// -1: not given.
func (r chatRequest) maxTokens() int64 {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return -1
}

func (p *RateLimitProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == CountsPath {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.AllCounts())
		return
	}
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/chat/completions") {
		providerError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path))
		return
	}
	apiKey, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(apiKey) == "" {
		providerError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "You didn't provide an API key.")
		return
	}
	req, body, ok := readChatRequest(w, r, func() { p.count(apiKey, func(c *ProviderCounts) { c.Requests++; c.OtherErrors++ }) })
	if !ok {
		return
	}

	prompt, maxTokens := req.promptTokens(), req.maxTokens()
	completion := p.cfg.CompletionTokens
	if maxTokens >= 0 {
		completion = min(completion, maxTokens)
	}
	// OpenAI counts a request's max tokens towards TPM as it arrives;
	// without one, what the reply will use.
	reserved := prompt + max(maxTokens, completion)
	admitted, latency, headers, refusal := p.admit(apiKey, reserved)
	for name, value := range headers {
		w.Header().Set(name, value)
	}
	if !admitted {
		providerError(w, http.StatusTooManyRequests, refusal.kind, "rate_limit_exceeded", refusal.message)
		return
	}
	select {
	case <-r.Context().Done():
		p.settle(apiKey, reserved, 0, 0, false)
		return
	case <-time.After(latency):
	}

	tools := 0
	for _, m := range req.Messages {
		if m.Role == "tool" {
			tools++
		}
	}
	p.mu.Lock()
	p.serial++
	id := p.serial
	p.mu.Unlock()
	var message, finish string
	if tools >= p.cfg.Turns-1 || len(req.Tools) == 0 {
		answer, _ := json.Marshal(fmt.Sprintf("Done: %d tool calls made, all answered.", tools))
		message, finish = fmt.Sprintf(`{"role":"assistant","content":%s,"refusal":null}`, answer), "stop"
	} else {
		// Each turn's text has a word more, so that every result is news:
		// a run whose tool results repeat is stopped by agentsaga's
		// no-progress watchdog.
		args, _ := json.Marshal(fmt.Sprintf(`{"text":"turn %d of %d: count the words of this sentence%s"}`, tools+1, p.cfg.Turns,
			strings.Repeat(" again", tools+1)))
		message = fmt.Sprintf(`{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_bench_%d","type":"function","function":{"name":%q,"arguments":%s}}]}`,
			id, p.cfg.Tool, args)
		finish = "tool_calls"
	}
	w.Header().Set("x-request-id", fmt.Sprintf("req_bench_%d", id))
	model := req.Model
	if model == "" {
		model = "bench-ratelimit"
	}
	reply := fmt.Sprintf(`{"id":"chatcmpl-bench-%d","object":"chat.completion","created":%d,"model":%q,`+
		`"choices":[{"index":0,"message":%s,"logprobs":null,"finish_reason":%q}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d},"system_fingerprint":"fp_bench"}`,
		id, time.Now().Unix(), model, message, finish, prompt, completion, prompt+completion)
	// A reply the client stopped reading was still generated, and billed.
	_ = agentsagatest.WriteReply(w, body, []byte(reply))
	p.settle(apiKey, reserved, prompt, completion, true)
}

// providerRefusal is a 429's error type ("requests" or "tokens") and text.
type providerRefusal struct{ kind, message string }

// admit refills apiKey's buckets, takes one request and reserved tokens
// when both have room, and returns the headers OpenAI sends with the
// answer: the limits, what remains after this request, and when each
// bucket is full again; on a refusal also retry-after(-ms), when this
// request would fit.
func (p *RateLimitProvider) admit(apiKey string, reserved int64) (bool, time.Duration, map[string]string, providerRefusal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	k := p.refilled(apiKey, now)
	k.counts.Requests++
	if k.counts.First.IsZero() {
		k.counts.First = now
	}
	rpm, tpm := float64(p.cfg.RequestsPerMinute), float64(p.cfg.TokensPerMinute)
	var wait time.Duration
	var refusal providerRefusal
	switch {
	case rpm > 0 && k.requests < 1:
		wait = untilLevel(k.requests, 1, rpm)
		refusal = providerRefusal{"requests", fmt.Sprintf("Rate limit reached for requests in organization org-bench on requests per min (RPM): Limit %d, Used %d, Requested 1. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
			p.cfg.RequestsPerMinute, p.cfg.RequestsPerMinute-int64(math.Floor(k.requests)), openAIDuration(wait))}
		k.counts.RateLimitedByRPM++
	case tpm > 0 && float64(reserved) > tpm:
		// Never fits: OpenAI says so with the same 429.
		wait = time.Minute
		refusal = providerRefusal{"tokens", fmt.Sprintf("Request too large for tokens per min (TPM): Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.",
			p.cfg.TokensPerMinute, reserved)}
		k.counts.RateLimitedByTPM++
	case tpm > 0 && k.tokens < float64(reserved):
		wait = untilLevel(k.tokens, float64(reserved), tpm)
		refusal = providerRefusal{"tokens", fmt.Sprintf("Rate limit reached for tokens in organization org-bench on tokens per min (TPM): Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
			p.cfg.TokensPerMinute, p.cfg.TokensPerMinute-int64(math.Floor(k.tokens)), reserved, openAIDuration(wait))}
		k.counts.RateLimitedByTPM++
	}
	admitted := refusal.kind == ""
	if admitted {
		if rpm > 0 {
			k.requests--
		}
		if tpm > 0 {
			k.tokens -= float64(reserved)
		}
	} else {
		k.counts.RateLimited++
		if len(k.counts.Refusals) < maxRefusalsKept {
			k.counts.Refusals = append(k.counts.Refusals, ProviderRefusal{At: now, Type: refusal.kind, Requested: reserved, Requests: k.requests, Tokens: k.tokens})
		}
	}
	headers := map[string]string{}
	if rpm > 0 {
		headers["x-ratelimit-limit-requests"] = strconv.FormatInt(p.cfg.RequestsPerMinute, 10)
		headers["x-ratelimit-remaining-requests"] = strconv.FormatInt(int64(math.Max(0, math.Floor(k.requests))), 10)
		headers["x-ratelimit-reset-requests"] = openAIDuration(untilLevel(k.requests, rpm, rpm))
	}
	if tpm > 0 {
		headers["x-ratelimit-limit-tokens"] = strconv.FormatInt(p.cfg.TokensPerMinute, 10)
		headers["x-ratelimit-remaining-tokens"] = strconv.FormatInt(int64(math.Max(0, math.Floor(k.tokens))), 10)
		headers["x-ratelimit-reset-tokens"] = openAIDuration(untilLevel(k.tokens, tpm, tpm))
	}
	if !admitted {
		headers["retry-after-ms"] = strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10)
		headers["retry-after"] = strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10)
		return false, 0, headers, refusal
	}
	return true, p.cfg.draw(p.random), headers, refusal
}

// settle gives back what an answered request reserved but did not use
// and counts it; a request abandoned before its reply gives back all.
func (p *RateLimitProvider) settle(apiKey string, reserved, prompt, completion int64, answered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	k := p.refilled(apiKey, now)
	if p.cfg.TokensPerMinute > 0 {
		k.tokens = math.Min(float64(p.cfg.TokensPerMinute), k.tokens+float64(reserved-prompt-completion))
	}
	if !answered {
		return
	}
	k.counts.Answered++
	k.counts.PromptTokens += prompt
	k.counts.CompletionTokens += completion
	k.counts.TokensAdmitted += prompt + completion
	k.counts.Last = now
}

// count changes apiKey's counts under the lock.
func (p *RateLimitProvider) count(apiKey string, change func(*ProviderCounts)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change(&p.refilled(apiKey, p.now()).counts)
}

// refilled is apiKey's state, its buckets refilled to now; a new key
// starts full. The caller holds p.mu.
func (p *RateLimitProvider) refilled(apiKey string, now time.Time) *providerKey {
	rpm, tpm := float64(p.cfg.RequestsPerMinute), float64(p.cfg.TokensPerMinute)
	k, ok := p.keys[apiKey]
	if !ok {
		k = &providerKey{requests: rpm, tokens: tpm, at: now, name: fmt.Sprintf("key-%d", len(p.keys)+1)}
		p.keys[apiKey] = k
		return k
	}
	if dt := now.Sub(k.at).Seconds(); dt > 0 {
		k.requests = math.Min(rpm, k.requests+rpm/60*dt)
		k.tokens = math.Min(tpm, k.tokens+tpm/60*dt)
		k.at = now
	}
	return k
}

// untilLevel is how long a bucket at level, refilled at perMinute/60 a
// second, takes to reach want.
func untilLevel(level, want, perMinute float64) time.Duration {
	if level >= want || perMinute <= 0 {
		return 0
	}
	return time.Duration((want - level) / (perMinute / 60) * float64(time.Second))
}

// openAIDuration writes d as OpenAI's x-ratelimit-reset-* headers do: "1s",
// "6m0s", "120ms", "1.5s": Go's notation, to the millisecond.
func openAIDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return d.Round(time.Millisecond).String()
}

// providerError answers OpenAI's error body.
// readChatRequest reads a fake provider's request body, a chat.completions
// request with messages; when it is not one, it calls refused (when set),
// answers 400, and ok is false.
func readChatRequest(w http.ResponseWriter, r *http.Request, refused func()) (req chatRequest, body []byte, ok bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || len(req.Messages) == 0 {
		if refused != nil {
			refused()
		}
		providerError(w, http.StatusBadRequest, "invalid_request_error", "", "The request body is not a chat.completions request with messages.")
		return req, body, false
	}
	return req, body, true
}

func providerError(w http.ResponseWriter, status int, kind, code, message string) {
	body := map[string]any{"error": map[string]any{"message": message, "type": kind, "param": nil, "code": nil}}
	if code != "" {
		body["error"].(map[string]any)["code"] = code
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
