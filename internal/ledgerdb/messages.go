package ledgerdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Message is one row of a run's conversation. The workflow numbers them
// (Seq) and carries only references; the activity that produced a message
// writes it, once.
type Message struct {
	Seq     int    `json:"seq"`
	Role    string `json:"role"`
	Content string `json:"content"`
	// ToolCalls are an assistant message's calls, as the activities
	// package encodes them.
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Name       string          `json:"name,omitempty"`
	// Pinned messages are sent whole in every request.
	Pinned bool `json:"pinned,omitempty"`
	// SourceKey is the idempotency key of the call that produced it.
	SourceKey string `json:"source_key,omitempty"`
	// Tokens is its size as its writer estimated it (0: not estimated).
	Tokens int `json:"tokens,omitempty"`
	// Bytes is the whole content's length, even when Content is cut.
	Bytes     int       `json:"bytes"`
	CreatedAt time.Time `json:"created_at"`
}

// MessageSize is a message without its content: what fitting a request to
// a context budget needs to decide.
type MessageSize struct {
	Seq    int    `json:"seq"`
	Role   string `json:"role"`
	Pinned bool   `json:"pinned,omitempty"`
	Key    string `json:"key,omitempty"`
	Tokens int    `json:"tokens"`
	Bytes  int    `json:"bytes"`
}

// appendMessages writes messages of a run that no activity wrote yet (the
// system prompt, the goal, a human's instruction, a failed call's error).
// A seq already written keeps its first content.
func (s *Store) appendMessages(ctx context.Context, workflowID string, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	seqs := make([]int32, len(msgs))
	roles, contents, toolCallIDs, names, keys := make([]string, len(msgs)), make([]string, len(msgs)),
		make([]string, len(msgs)), make([]string, len(msgs)), make([]string, len(msgs))
	toolCalls := make([]*string, len(msgs))
	pinned := make([]bool, len(msgs))
	tokens := make([]int32, len(msgs))
	for i, m := range msgs {
		seqs[i], roles[i], contents[i], toolCallIDs[i], names[i], keys[i], pinned[i], tokens[i] =
			int32(m.Seq), m.Role, storable(m.Content), m.ToolCallID, m.Name, m.SourceKey, m.Pinned, int32(m.Tokens)
		if len(m.ToolCalls) > 0 {
			calls := string(m.ToolCalls)
			toolCalls[i] = &calls
		}
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO messages (workflow_id, seq, role, content, tool_calls, tool_call_id, name, pinned, source_key, tokens)
		SELECT $1, m.seq, m.role, m.content, m.tool_calls::jsonb, m.tool_call_id, m.name, m.pinned, m.source_key, m.tokens
		FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bool[], $9::text[], $10::int[])
		     AS m(seq, role, content, tool_calls, tool_call_id, name, pinned, source_key, tokens)
		ON CONFLICT (workflow_id, seq) DO NOTHING`,
		workflowID, seqs, roles, contents, toolCalls, toolCallIDs, names, pinned, keys, tokens)
	if err != nil {
		return fmt.Errorf("ledger: append %d messages to %s at %d: %w", len(msgs), workflowID, msgs[0].Seq, err)
	}
	return nil
}

// messageSizes returns the size of each of a run's messages before seq
// through, in order, without their content.
func (s *Store) messageSizes(ctx context.Context, workflowID string, through int) ([]MessageSize, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT seq, role, pinned, source_key, tokens, octet_length(content)
		FROM messages WHERE workflow_id = $1 AND seq < $2 ORDER BY seq`, workflowID, through)
	if err != nil {
		return nil, fmt.Errorf("ledger: read the conversation's sizes of %s: %w", workflowID, err)
	}
	sizes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (MessageSize, error) {
		var m MessageSize
		err := row.Scan(&m.Seq, &m.Role, &m.Pinned, &m.Key, &m.Tokens, &m.Bytes)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: read the conversation's sizes of %s: %w", workflowID, err)
	}
	return sizes, nil
}

// MessageWindow says which of a run's messages Messages reads, and how
// much of each.
type MessageWindow struct {
	// From leaves out every unpinned message before it.
	From int
	// CutBefore reads only the first CutBytes of every unpinned tool
	// output before it that is longer (Bytes still gives the whole length).
	CutBefore, CutBytes int
}

// Messages returns a run's conversation before seq through, in order, as
// far as w says: a long run's old turns are left out or sent as previews,
// and reading them whole every turn would make each turn cost more than
// the last. The zero window reads everything whole.
func (s *Store) Messages(ctx context.Context, workflowID string, through int, w MessageWindow) ([]Message, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT seq, role,
		       CASE WHEN seq < $4 AND role = 'tool' AND NOT pinned AND octet_length(content) > $5
		            THEN left(content, $5) ELSE content END,
		       tool_calls, tool_call_id, name, pinned, source_key, tokens, octet_length(content), created_at
		FROM messages WHERE workflow_id = $1 AND seq < $2 AND (seq >= $3 OR pinned) ORDER BY seq`,
		workflowID, through, w.From, w.CutBefore, w.CutBytes)
	if err != nil {
		return nil, fmt.Errorf("ledger: read the conversation of %s: %w", workflowID, err)
	}
	msgs, err := pgx.CollectRows(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("ledger: read the conversation of %s: %w", workflowID, err)
	}
	return msgs, nil
}

// ConversationPage is one page of a run's conversation, for operators:
// at most limit messages from seq from on (from < 0: the last limit), each
// cut to previewChars characters, and how many messages the run has.
func (s *Store) ConversationPage(ctx context.Context, workflowID string, from, limit, previewChars int) ([]Message, int, error) {
	var total int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE workflow_id = $1`, workflowID).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("ledger: count the conversation of %s: %w", workflowID, err)
	}
	if from < 0 {
		from = max(total-limit, 0)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT seq, role, left(content, $4), tool_calls, tool_call_id, name, pinned, source_key, tokens,
		       octet_length(content), created_at
		FROM messages WHERE workflow_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3`, workflowID, from, limit, previewChars)
	if err != nil {
		return nil, 0, fmt.Errorf("ledger: read a page of the conversation of %s: %w", workflowID, err)
	}
	msgs, err := pgx.CollectRows(rows, scanMessage)
	if err != nil {
		return nil, 0, fmt.Errorf("ledger: read a page of the conversation of %s: %w", workflowID, err)
	}
	return msgs, total, nil
}

// scanMessage reads a row of the columns Messages and ConversationPage
// select.
func scanMessage(row pgx.CollectableRow) (Message, error) {
	var m Message
	var calls []byte
	err := row.Scan(&m.Seq, &m.Role, &m.Content, &calls, &m.ToolCallID, &m.Name, &m.Pinned, &m.SourceKey,
		&m.Tokens, &m.Bytes, &m.CreatedAt)
	if len(calls) > 0 {
		m.ToolCalls = calls
	}
	return m, err
}

// RecordResultMessage writes, as message msg of workflowID's conversation,
// the stored result of the completed action key: a tool output read back
// whole (read_result). The key must be one of the run's own, one of its
// sub-agents', or one it inherited from the run it was forked from. It
// returns the result.
func (s *Store) RecordResultMessage(ctx context.Context, workflowID, key string, msg Message) (string, error) {
	var result string
	err := s.pool.QueryRow(ctx, `
		WITH source AS (
			SELECT coalesce(result, '') AS result FROM actions
			WHERE idempotency_key = $2 AND status = 'completed' AND (starts_with(idempotency_key, $1 || '/') OR workflow_id = $1)
		), recorded AS (
			INSERT INTO messages (workflow_id, seq, role, content, tool_call_id, name, source_key)
			SELECT $1, $3, 'tool', source.result, $4, $5, $2 FROM source
			ON CONFLICT (workflow_id, seq) DO NOTHING
		)
		SELECT result FROM source`, workflowID, key, msg.Seq, msg.ToolCallID, msg.Name).Scan(&result)
	if err != nil {
		return "", fmt.Errorf("ledger: read result %s back into %s: %w", key, workflowID, notFound(err))
	}
	return result, nil
}

// notFound turns pgx.ErrNoRows into ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}
