// Package apikeys owns the bearer keys of the HTTP API (issue 33): made with
// a name, scopes and optionally an account, shown once, kept only as a
// hash, revocable. It is the ledger room's, beside the ledger's tables.
package apikeys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The scopes a key may hold.
const (
	RunsRead        = "runs:read"
	RunsWrite       = "runs:write"
	ApprovalsDecide = "approvals:decide"
	// WebhooksManage makes, lists, rotates and deletes webhook endpoints
	// (of the key's account) and reads and redelivers their deliveries.
	WebhooksManage = "webhooks:manage"
)

// Scopes are every scope, in the order they are documented.
var Scopes = []string{RunsRead, RunsWrite, ApprovalsDecide, WebhooksManage}

// prefix starts every key, so a key that leaks is recognised (by people
// and by secret scanners) for what it is.
const prefix = "agentsaga_"

// ErrUnknownKey is what Authenticate says of a key that is not live: never
// made, mistyped or revoked, without saying which.
var ErrUnknownKey = errors.New("apikeys: the key is not a live key")

// Key is a live key's grant: who it is (its name, which a start or a
// decision records as who acted), what it may do and whose runs it sees.
type Key struct {
	Name    string    `json:"name"`
	Scopes  []string  `json:"scopes"`
	Account string    `json:"account,omitempty"`
	Created time.Time `json:"created"`
	Revoked time.Time `json:"revoked,omitzero"`
}

// Can says whether the key holds scope.
func (k Key) Can(scope string) bool { return slices.Contains(k.Scopes, scope) }

// Sees says whether the key may see a run charged to account: every run
// for a key bound to no account, else its account's and its sub-accounts'
// ("acme" sees "acme/support"; "acme" does not see "acme-corp").
func (k Key) Sees(account string) bool {
	return k.Account == "" || account == k.Account || strings.HasPrefix(account, k.Account+"/")
}

// Keys are the API keys kept in one Postgres database.
type Keys struct{ pool *pgxpool.Pool }

// New returns the keys kept in pool's database (migrated to 00025 or later).
func New(pool *pgxpool.Pool) *Keys { return &Keys{pool: pool} }

// Create makes a key and returns it, the only time it is shown.
func (ks *Keys) Create(ctx context.Context, name string, scopes []string, account string) (string, Key, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", Key{}, errors.New("apikeys: create: a key needs a name (--name), which records who acted")
	}
	if len(scopes) == 0 {
		return "", Key{}, fmt.Errorf("apikeys: create %s: a key needs at least one scope, of %s", name, strings.Join(Scopes, ", "))
	}
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return "", Key{}, fmt.Errorf("apikeys: create %s: unknown scope %q; the scopes are %s", name, s, strings.Join(Scopes, ", "))
		}
	}
	account = strings.Trim(strings.TrimSpace(account), "/")
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", Key{}, fmt.Errorf("apikeys: create %s: %w", name, err)
	}
	token := prefix + base64.RawURLEncoding.EncodeToString(secret)
	k := Key{Name: name, Scopes: slices.Compact(slices.Sorted(slices.Values(scopes))), Account: account}
	err := ks.pool.QueryRow(ctx, `INSERT INTO api_keys (name, hash, scopes, account) VALUES ($1, $2, $3, $4) RETURNING created_at`,
		k.Name, hash(token), k.Scopes, k.Account).Scan(&k.Created)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return "", Key{}, fmt.Errorf("apikeys: create %s: a live key has that name; revoke it first or pick another", name)
	}
	if err != nil {
		return "", Key{}, fmt.Errorf("apikeys: create %s: %w", name, err)
	}
	return token, k, nil
}

// Authenticate returns the grant of a live key, and notes its use.
func (ks *Keys) Authenticate(ctx context.Context, token string) (Key, error) {
	if !strings.HasPrefix(token, prefix) {
		return Key{}, ErrUnknownKey
	}
	var k Key
	err := ks.pool.QueryRow(ctx, `
		UPDATE api_keys SET last_used_at = now() WHERE hash = $1 AND revoked_at IS NULL
		RETURNING name, scopes, account, created_at`, hash(token)).Scan(&k.Name, &k.Scopes, &k.Account, &k.Created)
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, ErrUnknownKey
	}
	if err != nil {
		return Key{}, fmt.Errorf("apikeys: authenticate: %w", err)
	}
	return k, nil
}

// StillLive says whether a key Authenticate accepted is live still, for
// a request that outlasts its authentication (an event stream); it reads
// only, where Authenticate notes a use.
func (ks *Keys) StillLive(ctx context.Context, token string) (bool, error) {
	var live bool
	err := ks.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys WHERE hash = $1 AND revoked_at IS NULL)`, hash(token)).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("apikeys: check a key: %w", err)
	}
	return live, nil
}

// Revoke ends the live key named name at once: its next request is
// refused.
func (ks *Keys) Revoke(ctx context.Context, name string) error {
	tag, err := ks.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL`, name)
	if err != nil {
		return fmt.Errorf("apikeys: revoke %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("apikeys: revoke %s: no live key has that name", name)
	}
	return nil
}

// List returns every key, live and revoked, oldest first; never a key
// itself, which is not kept.
func (ks *Keys) List(ctx context.Context) ([]Key, error) {
	rows, err := ks.pool.Query(ctx, `SELECT name, scopes, account, created_at, revoked_at FROM api_keys ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("apikeys: list: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Key, error) {
		var k Key
		var revoked *time.Time
		err := row.Scan(&k.Name, &k.Scopes, &k.Account, &k.Created, &revoked)
		if revoked != nil {
			k.Revoked = *revoked
		}
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("apikeys: list: %w", err)
	}
	return keys, nil
}

func hash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}
