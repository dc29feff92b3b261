package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// An operator makes a key, which is printed once and authenticates; lists
// the keys, which never shows one; revokes it, after which it is refused;
// a bad request names what is wrong and makes nothing.
func TestKeysFromTheCLI(t *testing.T) {
	databaseURL := agentsagatest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	out, err := runCLI(t, "keys")
	require.NoError(t, err, out)
	assert.Contains(t, out, "no API key")

	out, err = runCLI(t, "keys", "create", "--name", "support-app", "--scopes", "runs:read,approvals:decide", "--account", "acme")
	require.NoError(t, err, out)
	token := strings.Fields(out)[0]
	require.True(t, strings.HasPrefix(token, "agentsaga_"), out)
	assert.Contains(t, out, "not shown again")

	store, err := ledgerdb.Open(context.Background(), databaseURL)
	require.NoError(t, err)
	defer store.Close()
	keys := apikeys.New(store.Pool())
	k, err := keys.Authenticate(context.Background(), token)
	require.NoError(t, err)
	assert.Equal(t, apikeys.Key{Name: "support-app", Scopes: []string{"approvals:decide", "runs:read"}, Account: "acme", Created: k.Created}, k)

	out, err = runCLI(t, "keys")
	require.NoError(t, err, out)
	assert.Contains(t, out, "support-app")
	assert.Contains(t, out, "approvals:decide,runs:read")
	assert.NotContains(t, out, token)
	out, err = runCLI(t, "keys", "--json")
	require.NoError(t, err, out)
	var list []apikeys.Key
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list, 1)
	assert.NotContains(t, out, token)

	_, err = runCLI(t, "keys", "create", "--name", "x", "--scopes", "runs:delete")
	require.ErrorContains(t, err, `unknown scope "runs:delete"`)
	_, err = runCLI(t, "keys", "create", "--scopes", "runs:read")
	require.ErrorContains(t, err, "a key needs a name")

	out, err = runCLI(t, "keys", "revoke", "support-app")
	require.NoError(t, err, out)
	assert.Contains(t, out, "revoked key support-app")
	_, err = keys.Authenticate(context.Background(), token)
	require.ErrorIs(t, err, apikeys.ErrUnknownKey)
	_, err = runCLI(t, "keys", "revoke", "support-app")
	require.ErrorContains(t, err, "no live key has that name")
}
