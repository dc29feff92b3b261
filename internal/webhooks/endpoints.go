package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsaga/agentsaga/internal/jsonpath"
)

// The events an endpoint may hear (migration 00031 says which run event
// each one is).
const (
	RunEscalated       = "run.escalated"        // the run waits for a person: resume, retry, skip or abort
	ApprovalWaiting    = "approval.waiting"     // a call waits for approval
	ApprovalReminder   = "approval.reminder"    // an approval still waits (remind_every)
	ApprovalTimedOut   = "approval.timed_out"   // nobody decided in time; on_timeout was done
	EscalationReminder = "escalation.reminder"  // an escalated run still waits (escalate.remind_every)
	EscalationTimedOut = "escalation.timed_out" // nobody answered the escalation in time; on_timeout was done
	RunFinished        = "run.finished"         // the run ended, however it ended
	SpendCapReached    = "spend.cap_reached"    // an account's spend cap stopped the run: it waits, escalated or finished
	FormatStandard     = "standard"             // the Standard Webhooks JSON body
	FormatSlack        = "slack"                // {"text": ...} for a Slack incoming webhook
	secretPrefix       = "whsec_"
	previousSecretFor  = 24 * time.Hour
)

// Events are every event an endpoint may hear, in the order documented.
var Events = []string{RunEscalated, ApprovalWaiting, ApprovalReminder, ApprovalTimedOut, EscalationReminder, EscalationTimedOut, RunFinished, SpendCapReached}

// ErrNotFound is what an endpoint or a delivery that does not exist (or
// that the caller's account does not see) gives.
var ErrNotFound = errors.New("webhooks: not found")

// Endpoint is a URL that hears some events of one account's runs and its
// sub-accounts' (” account: every run). Its secret is shown once, when it
// is made or rotated: List leaves it out.
type Endpoint struct {
	ID           string   `json:"id"`
	Account      string   `json:"account"`
	URL          string   `json:"url"`
	Events       []string `json:"events"`
	Format       string   `json:"format"`
	AllowPrivate bool     `json:"allow_private"`
	// Redact are JSON paths ($.customer.email) replaced by "[redacted]" in
	// an approval's arguments, as a dataset's --redact replaces them.
	Redact         []string  `json:"redact,omitempty"`
	CreatedBy      string    `json:"created_by,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	RotatedAt      time.Time `json:"rotated_at,omitzero"`
	PreviousUntil  time.Time `json:"previous_secret_until,omitzero"`
	DisabledAt     time.Time `json:"disabled_at,omitzero"`
	DisabledReason string    `json:"disabled_reason,omitempty"`
	// Secret is set only by Create and Rotate.
	Secret string `json:"secret,omitempty"`
}

// NewEndpoint is what Create takes.
type NewEndpoint struct {
	URL          string   `json:"url"`
	Events       []string `json:"events"`
	Account      string   `json:"account,omitempty"`
	Format       string   `json:"format,omitempty"`
	AllowPrivate bool     `json:"allow_private,omitempty"`
	Redact       []string `json:"redact,omitempty"`
	CreatedBy    string   `json:"-"`
}

// Validate checks what Create would refuse, without the database.
func (n *NewEndpoint) Validate() error {
	if n.Format == "" {
		n.Format = FormatStandard
	}
	if n.Format != FormatStandard && n.Format != FormatSlack {
		return fmt.Errorf("webhooks: format %q: want %s or %s", n.Format, FormatStandard, FormatSlack)
	}
	u, err := url.Parse(n.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhooks: url %q: want an http:// or https:// URL", n.URL)
	}
	if u.User != nil {
		return fmt.Errorf("webhooks: url %q: credentials in a URL would be stored and logged; the signature authenticates the sender", n.URL)
	}
	if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && !n.AllowPrivate {
		if why := Refused(ip); why != "" {
			return fmt.Errorf("webhooks: url %q: %s; --allow-private allows it", n.URL, why)
		}
	}
	if u.Hostname() == "localhost" && !n.AllowPrivate {
		return fmt.Errorf("webhooks: url %q: localhost is loopback; --allow-private allows it", n.URL)
	}
	if len(n.Events) == 0 {
		return fmt.Errorf("webhooks: name the events to hear, of %s", strings.Join(Events, ", "))
	}
	for _, e := range n.Events {
		if !slices.Contains(Events, e) {
			return fmt.Errorf("webhooks: unknown event %q; the events are %s", e, strings.Join(Events, ", "))
		}
	}
	n.Events = slices.Compact(slices.Sorted(slices.Values(n.Events)))
	for _, p := range n.Redact {
		if _, err := jsonpath.Parse(p); err != nil {
			return fmt.Errorf("webhooks: redact %q: %w", p, err)
		}
	}
	return nil
}

// Store keeps endpoints and deliveries in a ledger database (migrated to
// 00031 or later).
type Store struct{ pool *pgxpool.Pool }

// NewStore returns the webhooks kept in pool's database.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// NewSecret is a fresh signing secret: whsec_ and 24 random bytes in
// base64, as Standard Webhooks writes them.
func NewSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

func newID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Create makes an endpoint and returns it with its secret, the only time
// the secret is shown.
func (s *Store) Create(ctx context.Context, n NewEndpoint) (Endpoint, error) {
	if err := n.Validate(); err != nil {
		return Endpoint{}, err
	}
	e := Endpoint{ID: newID("we_"), Account: n.Account, URL: n.URL, Events: n.Events, Format: n.Format,
		AllowPrivate: n.AllowPrivate, Redact: n.Redact, CreatedBy: n.CreatedBy, Secret: NewSecret()}
	err := s.pool.QueryRow(ctx, `
		INSERT INTO webhook_endpoints (id, account, url, events, format, secret, allow_private, redact, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8, '{}'::text[]), $9) RETURNING created_at`,
		e.ID, e.Account, e.URL, e.Events, e.Format, e.Secret, e.AllowPrivate, e.Redact, e.CreatedBy).Scan(&e.CreatedAt)
	if err != nil {
		return Endpoint{}, fmt.Errorf("webhooks: create: %w", err)
	}
	return e, nil
}

const endpointColumns = `id, account, url, events, format, allow_private, redact, created_by, created_at,
	rotated_at, previous_until, disabled_at, disabled_reason`

func scanEndpoint(row pgx.Row) (Endpoint, error) {
	var e Endpoint
	var rotated, prevUntil, disabled *time.Time
	err := row.Scan(&e.ID, &e.Account, &e.URL, &e.Events, &e.Format, &e.AllowPrivate, &e.Redact, &e.CreatedBy, &e.CreatedAt,
		&rotated, &prevUntil, &disabled, &e.DisabledReason)
	if rotated != nil {
		e.RotatedAt = *rotated
	}
	if prevUntil != nil && prevUntil.After(time.Now()) {
		e.PreviousUntil = *prevUntil
	}
	if disabled != nil {
		e.DisabledAt = *disabled
	}
	return e, err
}

// within is the SQL condition that an endpoint's account is scope or
// under it (” scope: every endpoint), scope being $1.
const within = `($1 = '' OR account = $1 OR starts_with(account, $1 || '/'))`

// List returns the endpoints whose account is scope or under it (every
// endpoint for ""), oldest first, without their secrets.
func (s *Store) List(ctx context.Context, scope string) ([]Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE `+within+` ORDER BY created_at, id`, scope)
	if err != nil {
		return nil, fmt.Errorf("webhooks: list: %w", err)
	}
	defer rows.Close()
	var out []Endpoint
	for rows.Next() {
		e, err := scanEndpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("webhooks: list: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Delete removes endpoint id, with its deliveries, if scope sees it.
func (s *Store) Delete(ctx context.Context, scope, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_endpoints WHERE `+within+` AND id = $2`, scope, id)
	if err != nil {
		return fmt.Errorf("webhooks: delete %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	}
	return nil
}

// Rotate gives endpoint id a new secret and returns it with it. The
// secret it replaces stays valid, and signs beside the new one, for 24
// hours; a second rotation within them ends the first one's old secret.
func (s *Store) Rotate(ctx context.Context, scope, id string) (Endpoint, error) {
	secret := NewSecret()
	e, err := scanEndpoint(s.pool.QueryRow(ctx, `
		UPDATE webhook_endpoints SET previous_secret = secret, previous_until = now() + $3::interval,
			secret = $4, rotated_at = now()
		WHERE `+within+` AND id = $2 RETURNING `+endpointColumns, scope, id, previousSecretFor.String(), secret))
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("webhooks: rotate %s: %w", id, err)
	}
	e.Secret = secret
	return e, nil
}

// Enable lets a disabled endpoint (410, or by hand) hear events again; the
// deliveries it held go out.
func (s *Store) Enable(ctx context.Context, scope, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE webhook_endpoints SET disabled_at = NULL, disabled_reason = ''
		WHERE `+within+` AND id = $2`, scope, id)
	if err != nil {
		return fmt.Errorf("webhooks: enable %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: endpoint %s", ErrNotFound, id)
	}
	_, _ = s.pool.Exec(ctx, `SELECT pg_notify('agentsaga_webhooks', '')`)
	return nil
}
