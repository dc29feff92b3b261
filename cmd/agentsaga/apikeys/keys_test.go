package apikeys_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
)

func newKeys(t *testing.T) (*apikeys.Keys, *pgxpool.Pool) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), agentsagatest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return apikeys.New(pool), pool
}

// A key is shown once and kept only as its hash; it authenticates until it
// is revoked, and then is refused like a key never made.
func TestAKeyIsShownOnceKeptAsAHashAndRevocable(t *testing.T) {
	ctx := context.Background()
	keys, pool := newKeys(t)
	token, key, err := keys.Create(ctx, "support-app", []string{apikeys.RunsWrite, apikeys.RunsRead, apikeys.RunsRead}, "/acme/")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(token, "agentsaga_"))
	require.Equal(t, []string{apikeys.RunsRead, apikeys.RunsWrite}, key.Scopes)
	require.Equal(t, "acme", key.Account)

	var stored int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM api_keys k WHERE strpos(k::text, $1) > 0 OR strpos(k::text, encode(convert_to($1, 'UTF8'), 'hex')) > 0`, token).Scan(&stored))
	require.Zero(t, stored, "the key itself is nowhere in the table")

	got, err := keys.Authenticate(ctx, token)
	require.NoError(t, err)
	require.Equal(t, "support-app", got.Name)
	require.True(t, got.Can(apikeys.RunsWrite))
	require.False(t, got.Can(apikeys.ApprovalsDecide))

	for _, wrong := range []string{"", "agentsaga_", token + "x", strings.TrimPrefix(token, "agentsaga_"), "Bearer " + token} {
		_, err := keys.Authenticate(ctx, wrong)
		require.ErrorIs(t, err, apikeys.ErrUnknownKey, "%q", wrong)
	}

	require.NoError(t, keys.Revoke(ctx, "support-app"))
	_, err = keys.Authenticate(ctx, token)
	require.ErrorIs(t, err, apikeys.ErrUnknownKey, "a revoked key is refused")
	require.ErrorContains(t, keys.Revoke(ctx, "support-app"), "no live key has that name")

	// The name is free again; the revoked key stays on the list.
	_, _, err = keys.Create(ctx, "support-app", []string{apikeys.RunsRead}, "")
	require.NoError(t, err)
	list, err := keys.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.False(t, list[0].Revoked.IsZero())
	require.True(t, list[1].Revoked.IsZero())
}

// Bad input names what is wrong and makes no key.
func TestABadKeyRequestMakesNoKey(t *testing.T) {
	ctx := context.Background()
	keys, _ := newKeys(t)
	_, _, err := keys.Create(ctx, " ", []string{apikeys.RunsRead}, "")
	require.ErrorContains(t, err, "a key needs a name")
	_, _, err = keys.Create(ctx, "a", nil, "")
	require.ErrorContains(t, err, "at least one scope, of runs:read, runs:write, approvals:decide")
	_, _, err = keys.Create(ctx, "a", []string{"runs:delete"}, "")
	require.ErrorContains(t, err, `unknown scope "runs:delete"`)
	_, _, err = keys.Create(ctx, "a", []string{apikeys.RunsRead}, "")
	require.NoError(t, err)
	_, _, err = keys.Create(ctx, "a", []string{apikeys.RunsRead}, "")
	require.ErrorContains(t, err, "a live key has that name")
	list, err := keys.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
}

// A key bound to an account sees its runs and its sub-accounts', and no
// other account's, even one whose name starts the same.
func TestAKeySeesItsAccountTree(t *testing.T) {
	acme := apikeys.Key{Account: "acme"}
	assert.True(t, acme.Sees("acme"))
	assert.True(t, acme.Sees("acme/support"))
	assert.False(t, acme.Sees("acme-corp"))
	assert.False(t, acme.Sees(""), "a run charged to no account is no account's")
	assert.True(t, apikeys.Key{}.Sees("anyone"), "a key bound to no account sees every run")
}

// Keys used side by side authenticate each as itself (-race).
func TestKeysAuthenticateSideBySide(t *testing.T) {
	ctx := context.Background()
	keys, _ := newKeys(t)
	tokens := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		token, _, err := keys.Create(ctx, name, []string{apikeys.RunsRead}, name)
		require.NoError(t, err)
		tokens[name] = token
	}
	var wg sync.WaitGroup
	for name, token := range tokens {
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k, err := keys.Authenticate(ctx, token)
				assert.NoError(t, err)
				assert.Equal(t, name, k.Name)
				assert.Equal(t, name, k.Account)
			}()
		}
	}
	wg.Wait()
}
