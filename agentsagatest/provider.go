package agentsagatest

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/agentsaga/agentsaga/internal/providerwire"
)

// WriteReply answers a request to a fake model server with reply, the
// JSON a non-streaming call gets: an OpenAI chat.completion object
// ("object": "chat.completion") or an Anthropic message ("type":
// "message"). When the request body asks for a stream ("stream": true),
// the reply goes out as that API's server-sent events, its text and
// arguments cut into deltas of a few characters, as ReplyStream cuts it.
// A reply of neither kind is an error that says so, and nothing has been
// written.
func WriteReply(w http.ResponseWriter, request, reply []byte) error {
	events, err := replyEvents(reply)
	if err != nil {
		return err
	}
	if !providerwire.Streams(request) {
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		if _, err := w.Write(reply); err != nil {
			return fmt.Errorf("agentsagatest: write the reply: %w", err)
		}
		return nil
	}
	streamed, err := events(reply, providerwire.FakePiece)
	if err != nil {
		return fmt.Errorf("agentsagatest: %w", err)
	}
	return providerwire.WriteStream(w, streamed)
}

// ReplyStream is reply (as WriteReply takes it) as the body of a streamed
// answer, one server-sent event to an element, each ending with its blank
// line, text and arguments cut into deltas of at most piece characters. A
// fake server writes the elements itself when it paces them, as a real
// provider sends a token or two at a time.
func ReplyStream(reply []byte, piece int) ([][]byte, error) {
	events, err := replyEvents(reply)
	if err != nil {
		return nil, err
	}
	streamed, err := events(reply, piece)
	if err != nil {
		return nil, fmt.Errorf("agentsagatest: %w", err)
	}
	out := make([][]byte, len(streamed))
	for i := range streamed {
		out[i] = providerwire.Encode(streamed[i : i+1])
	}
	return out, nil
}

// replyEvents picks the stream encoding of reply's API by its kind.
func replyEvents(reply []byte) (func([]byte, int) ([]providerwire.Event, error), error) {
	var kind struct {
		Object string `json:"object"`
		Type   string `json:"type"`
	}
	if err := json.Unmarshal(reply, &kind); err != nil {
		return nil, fmt.Errorf("agentsagatest: the reply is not a JSON object: %w", err)
	}
	switch {
	case kind.Object == "chat.completion":
		return providerwire.ChatCompletionEvents, nil
	case kind.Type == "message":
		return providerwire.MessageEvents, nil
	}
	return nil, fmt.Errorf(`agentsagatest: the reply is neither a chat completion ("object": "chat.completion") nor an Anthropic message ("type": "message"): object %q, type %q`, kind.Object, kind.Type)
}
