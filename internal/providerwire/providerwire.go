// Package providerwire owns the one definition of how agentsaga's fake
// model providers (the tests', and the benchmarks' through agentsagatest) write
// a reply: whole, as the JSON a non-streaming request gets, or streamed as
// server-sent events, as the real APIs stream it: OpenAI's
// chat.completion.chunk objects ending with data: [DONE], and Anthropic's
// message_start ... message_stop events. A fake builds its reply as the
// non-streamed JSON and hands it here, so every fake streams the same way
// and no fake keeps a copy of the encoding. Text is cut into small deltas,
// so that a client's assembly of fragments is exercised by every fake, and
// the bytes of each JSON string are kept as the reply wrote them (invalid
// UTF-8 and escapes included), so a streamed reply says exactly what the
// whole one did. Standard library only.
package providerwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"
)

// FakePiece is the most characters of text, refusal or tool arguments one
// delta carries in what WriteChatCompletion and WriteMessage stream: a few,
// as a real provider sends a token or two at a time.
const FakePiece = 8

// Event is one server-sent event: Name is its event: line (Anthropic names
// every event; OpenAI names none) and Data its data: line.
type Event struct {
	Name string
	Data []byte
}

// Done is the event that ends an OpenAI stream.
var Done = Event{Data: []byte("[DONE]")}

// Encode is events as a text/event-stream body.
func Encode(events []Event) []byte {
	var b bytes.Buffer
	for _, e := range events {
		if e.Name != "" {
			b.WriteString("event: ")
			b.WriteString(e.Name)
			b.WriteByte('\n')
		}
		b.WriteString("data: ")
		b.Write(e.Data)
		b.WriteString("\n\n")
	}
	return b.Bytes()
}

// WriteStream answers with events as a text/event-stream body and flushes
// them, so that a test may then cut the connection after them. The caller
// has set any other headers; the status is 200 unless it wrote one.
func WriteStream(w http.ResponseWriter, events []Event) error {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	if _, err := w.Write(Encode(events)); err != nil {
		return fmt.Errorf("providerwire: writing %d events: %w", len(events), err)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// Streams reports whether a request body asks for its reply as a stream,
// as both APIs spell it: "stream": true.
func Streams(request []byte) bool {
	var r struct {
		Stream bool `json:"stream"`
	}
	return json.Unmarshal(request, &r) == nil && r.Stream
}

// WriteChatCompletion answers a chat.completions request with completion,
// the JSON of a chat.completion object: as it is, or, when stream is set,
// as ChatCompletionEvents cuts it in pieces of FakePiece; then a
// completion it cannot read is an error, and nothing has been written.
func WriteChatCompletion(w http.ResponseWriter, stream bool, completion []byte) error {
	return write(w, stream, completion, ChatCompletionEvents)
}

// WriteMessage answers a messages request with message, the JSON of an
// Anthropic message: as it is, or, when stream is set, as MessageEvents
// cuts it in pieces of FakePiece; then a message it cannot read is an
// error, and nothing has been written.
func WriteMessage(w http.ResponseWriter, stream bool, message []byte) error {
	return write(w, stream, message, MessageEvents)
}

func write(w http.ResponseWriter, stream bool, reply []byte, events func([]byte, int) ([]Event, error)) error {
	if !stream {
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		if _, err := w.Write(reply); err != nil {
			return fmt.Errorf("providerwire: writing the reply: %w", err)
		}
		return nil
	}
	streamed, err := events(reply, FakePiece)
	if err != nil {
		return err
	}
	return WriteStream(w, streamed)
}

// completion is the part of a chat.completion object a stream carries.
// Values are kept as raw JSON, so they reach the chunks byte for byte.
type completion struct {
	ID                json.RawMessage `json:"id"`
	Created           json.RawMessage `json:"created"`
	Model             json.RawMessage `json:"model"`
	SystemFingerprint json.RawMessage `json:"system_fingerprint"`
	ServiceTier       json.RawMessage `json:"service_tier"`
	Choices           []struct {
		Index   int64 `json:"index"`
		Message struct {
			Role      json.RawMessage `json:"role"`
			Content   json.RawMessage `json:"content"`
			Refusal   json.RawMessage `json:"refusal"`
			ToolCalls []struct {
				ID       json.RawMessage `json:"id"`
				Type     json.RawMessage `json:"type"`
				Function *callPart       `json:"function"`
				Custom   *callPart       `json:"custom"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason json.RawMessage `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

// callPart is a tool call's function (name, arguments) or custom tool
// (name, input), whole or a fragment of it.
type callPart struct {
	Name      json.RawMessage `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

type chunk struct {
	ID                json.RawMessage `json:"id,omitempty"`
	Object            string          `json:"object"`
	Created           json.RawMessage `json:"created,omitempty"`
	Model             json.RawMessage `json:"model,omitempty"`
	SystemFingerprint json.RawMessage `json:"system_fingerprint,omitempty"`
	ServiceTier       json.RawMessage `json:"service_tier,omitempty"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index int64 `json:"index"`
	Delta delta `json:"delta"`
	// FinishReason is null (a nil RawMessage) on every chunk but a
	// choice's last.
	FinishReason json.RawMessage `json:"finish_reason"`
}

type delta struct {
	Role      json.RawMessage `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	Refusal   json.RawMessage `json:"refusal,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int             `json:"index"`
	ID       json.RawMessage `json:"id,omitempty"`
	Type     json.RawMessage `json:"type,omitempty"`
	Function *callPart       `json:"function,omitempty"`
	Custom   *callPart       `json:"custom,omitempty"`
}

// ChatCompletionEvents is reply, the JSON of a chat.completion object, as
// OpenAI streams it: for each choice a chunk with its role,
// its content, refusal and each tool call's arguments (or custom input) in
// deltas of at most piece characters (all in one when piece < 1), a tool
// call's id, type and name in its first delta, then a chunk with the
// finish_reason; after the choices a chunk with no choices and the usage
// (as stream_options.include_usage asks), and Done.
func ChatCompletionEvents(reply []byte, piece int) ([]Event, error) {
	var c completion
	if err := unmarshalObject(reply, &c); err != nil {
		return nil, fmt.Errorf("providerwire: not a chat completion: %w", err)
	}
	var events []Event
	add := func(choices []chunkChoice, usage json.RawMessage) error {
		data, err := json.Marshal(chunk{ID: c.ID, Object: "chat.completion.chunk", Created: c.Created, Model: c.Model,
			SystemFingerprint: c.SystemFingerprint, ServiceTier: c.ServiceTier, Choices: choices, Usage: usage})
		if err != nil {
			return fmt.Errorf("providerwire: a chunk of the completion: %w", err)
		}
		events = append(events, Event{Data: data})
		return nil
	}
	for _, choice := range c.Choices {
		role := choice.Message.Role
		if isNull(role) {
			role = json.RawMessage(`"assistant"`)
		}
		deltas := []delta{{Role: role}}
		for _, p := range stringPieces(choice.Message.Content, piece) {
			deltas = append(deltas, delta{Content: p})
		}
		for _, p := range stringPieces(choice.Message.Refusal, piece) {
			deltas = append(deltas, delta{Refusal: p})
		}
		for i, call := range choice.Message.ToolCalls {
			first := toolCallDelta{Index: i, ID: call.ID, Type: call.Type}
			var rest []toolCallDelta
			switch {
			case call.Custom != nil:
				first.Custom = &callPart{Name: call.Custom.Name}
				for _, p := range stringPieces(call.Custom.Input, piece) {
					rest = append(rest, toolCallDelta{Index: i, Custom: &callPart{Input: p}})
				}
			case call.Function != nil:
				first.Function = &callPart{Name: call.Function.Name, Arguments: json.RawMessage(`""`)}
				for _, p := range stringPieces(call.Function.Arguments, piece) {
					rest = append(rest, toolCallDelta{Index: i, Function: &callPart{Arguments: p}})
				}
			}
			deltas = append(deltas, delta{ToolCalls: []toolCallDelta{first}})
			for _, d := range rest {
				deltas = append(deltas, delta{ToolCalls: []toolCallDelta{d}})
			}
		}
		for _, d := range deltas {
			if err := add([]chunkChoice{{Index: choice.Index, Delta: d}}, nil); err != nil {
				return nil, err
			}
		}
		if err := add([]chunkChoice{{Index: choice.Index, FinishReason: choice.FinishReason}}, nil); err != nil {
			return nil, err
		}
	}
	if !isNull(c.Usage) {
		if err := add([]chunkChoice{}, c.Usage); err != nil {
			return nil, err
		}
	}
	return append(events, Done), nil
}

// message is the part of an Anthropic message a stream carries, kept as
// raw JSON like completion.
type message struct {
	ID           json.RawMessage            `json:"id"`
	Role         json.RawMessage            `json:"role"`
	Model        json.RawMessage            `json:"model"`
	Content      []json.RawMessage          `json:"content"`
	StopReason   json.RawMessage            `json:"stop_reason"`
	StopSequence json.RawMessage            `json:"stop_sequence"`
	StopDetails  json.RawMessage            `json:"stop_details"`
	Usage        map[string]json.RawMessage `json:"usage"`
}

// MessageEvents is reply, the JSON of an Anthropic message, as the
// Messages API streams it: message_start with the message's usage but its
// output tokens, a ping, then each content block as content_block_start,
// its deltas (text_delta, input_json_delta for a tool_use block's input,
// thinking_delta and signature_delta; at most piece characters each, all in
// one when piece < 1) and content_block_stop, then message_delta with the
// stop reason and the output tokens, and message_stop.
func MessageEvents(reply []byte, piece int) ([]Event, error) {
	var m message
	if err := unmarshalObject(reply, &m); err != nil {
		return nil, fmt.Errorf("providerwire: not a message: %w", err)
	}
	var events []Event
	// Each event is named by its type, as the API names them.
	add := func(v map[string]any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("providerwire: an event of the message: %w", err)
		}
		events = append(events, Event{Name: v["type"].(string), Data: data})
		return nil
	}
	startUsage := map[string]json.RawMessage{}
	for name, v := range m.Usage {
		if name != "output_tokens" {
			startUsage[name] = v
		}
	}
	startUsage["output_tokens"] = json.RawMessage("0")
	role := m.Role
	if isNull(role) {
		role = json.RawMessage(`"assistant"`)
	}
	if err := add(map[string]any{"type": "message_start", "message": map[string]any{
		"id": orNull(m.ID), "type": "message", "role": role, "model": orNull(m.Model), "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}}); err != nil {
		return nil, err
	}
	if err := add(map[string]any{"type": "ping"}); err != nil {
		return nil, err
	}
	for i, raw := range m.Content {
		var block map[string]json.RawMessage
		if err := json.Unmarshal(raw, &block); err != nil {
			return nil, fmt.Errorf("providerwire: content[%d] is not a block: %w", i, err)
		}
		var kind string
		_ = json.Unmarshal(block["type"], &kind)
		start := block
		var deltas []map[string]any
		pieces := func(deltaType, field string, texts []json.RawMessage) {
			for _, p := range texts {
				deltas = append(deltas, map[string]any{"type": deltaType, field: p})
			}
		}
		switch kind {
		case "text":
			start = map[string]json.RawMessage{"type": block["type"], "text": json.RawMessage(`""`)}
			pieces("text_delta", "text", stringPieces(block["text"], piece))
		case "thinking":
			start = map[string]json.RawMessage{"type": block["type"], "thinking": json.RawMessage(`""`), "signature": json.RawMessage(`""`)}
			pieces("thinking_delta", "thinking", stringPieces(block["thinking"], piece))
			pieces("signature_delta", "signature", stringPieces(block["signature"], 0))
		case "tool_use":
			start = map[string]json.RawMessage{"type": block["type"], "id": orNull(block["id"]), "name": orNull(block["name"]), "input": json.RawMessage(`{}`)}
			if input, ok := block["input"]; ok {
				pieces("input_json_delta", "partial_json", textPieces(input, piece))
			}
		}
		if err := add(map[string]any{"type": "content_block_start", "index": i, "content_block": start}); err != nil {
			return nil, err
		}
		for _, d := range deltas {
			if err := add(map[string]any{"type": "content_block_delta", "index": i, "delta": d}); err != nil {
				return nil, err
			}
		}
		if err := add(map[string]any{"type": "content_block_stop", "index": i}); err != nil {
			return nil, err
		}
	}
	stop := map[string]json.RawMessage{"stop_reason": orNull(m.StopReason), "stop_sequence": orNull(m.StopSequence)}
	if len(m.StopDetails) > 0 {
		stop["stop_details"] = m.StopDetails
	}
	output := json.RawMessage("0")
	if v, ok := m.Usage["output_tokens"]; ok {
		output = v
	}
	if err := add(map[string]any{"type": "message_delta", "delta": stop, "usage": map[string]json.RawMessage{"output_tokens": output}}); err != nil {
		return nil, err
	}
	if err := add(map[string]any{"type": "message_stop"}); err != nil {
		return nil, err
	}
	return events, nil
}

// unmarshalObject is json.Unmarshal for a reply, which must be an object:
// a null one would stream as an empty reply, which it is not.
func unmarshalObject(reply []byte, v any) error {
	if trimmed := bytes.TrimSpace(reply); len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("the reply is not a JSON object")
	}
	return json.Unmarshal(reply, v)
}

func isNull(v json.RawMessage) bool {
	return len(v) == 0 || string(v) == "null"
}

func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// stringPieces cuts a JSON string literal into literals of at most piece
// characters each (one when piece < 1), keeping its bytes: an escape (a
// surrogate pair is one) or a UTF-8 character is never split, and an
// invalid byte counts as a character of its own. An empty string or null
// has no pieces; a value that is not a string is one piece as it is, for
// the client to read as it would have in the whole reply.
func stringPieces(literal json.RawMessage, piece int) []json.RawMessage {
	if isNull(literal) || string(literal) == `""` {
		return nil
	}
	if literal[0] != '"' || piece < 1 {
		return []json.RawMessage{literal}
	}
	inner := literal[1 : len(literal)-1]
	var pieces []json.RawMessage
	begin, count := 0, 0
	for i := 0; i < len(inner); {
		i += charSize(inner[i:])
		if count++; count == piece || i == len(inner) {
			p := make(json.RawMessage, 0, i-begin+2)
			p = append(append(append(p, '"'), inner[begin:i]...), '"')
			pieces = append(pieces, p)
			begin, count = i, 0
		}
	}
	return pieces
}

// charSize is the length of the character that s begins with, inside a
// JSON string literal.
func charSize(s []byte) int {
	if s[0] != '\\' {
		_, size := utf8.DecodeRune(s)
		return size
	}
	if len(s) < 6 || s[1] != 'u' {
		return min(2, len(s))
	}
	if isSurrogate(s[2:6], "d8", "d9", "da", "db") && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' && isSurrogate(s[8:12], "dc", "dd", "de", "df") {
		return 12
	}
	return 6
}

func isSurrogate(hex []byte, prefixes ...string) bool {
	for _, p := range prefixes {
		if bytes.EqualFold(hex[:2], []byte(p)) {
			return true
		}
	}
	return false
}

// textPieces cuts JSON text (a tool_use block's input) into JSON strings
// of at most piece characters each, as input_json_delta carries it.
func textPieces(text json.RawMessage, piece int) []json.RawMessage {
	var pieces []json.RawMessage
	for len(text) > 0 {
		end := len(text)
		if piece > 0 {
			end = 0
			for n := 0; n < piece && end < len(text); n++ {
				_, size := utf8.DecodeRune(text[end:])
				end += size
			}
		}
		p, _ := json.Marshal(string(text[:end]))
		pieces = append(pieces, p)
		text = text[end:]
	}
	return pieces
}
