package webhooks_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// The guard refuses loopback, the cloud metadata address, and a name
// that resolves to a private address, before anything is dialed; a
// public address is handed to the dialer (a stub here: no packet leaves).
func TestTheGuardRefusesPrivateTargets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	resolver := stubResolver{
		"hooks.internal.example": {netip.MustParseAddr("10.0.0.1")},
		"rebind.example":         {netip.MustParseAddr("203.0.114.7"), netip.MustParseAddr("127.0.0.1")},
		"public.example":         {netip.MustParseAddr("93.184.216.34")},
	}
	stub := &recordingDialer{}
	g := &webhooks.Guard{Resolver: resolver, Dialer: stub}
	for _, target := range []string{
		"127.0.0.1:443", "169.254.169.254:80", "hooks.internal.example:443", "[::1]:443", "[::ffff:127.0.0.1]:80",
		"[fe80::1]:80", "100.64.0.1:80", "192.168.1.1:80", "172.16.0.1:80", "[fd00::1]:80", "0.0.0.0:80", "224.0.0.1:80",
	} {
		_, err := g.DialContext(ctx, "tcp", target)
		require.ErrorIs(t, err, webhooks.ErrRefusedAddress, target)
	}
	require.Empty(t, stub.dialed, "nothing refused was dialed")

	_, err := g.DialContext(ctx, "tcp", "rebind.example:443")
	require.ErrorIs(t, err, errStubDial)
	require.Equal(t, []string{"203.0.114.7:443"}, stub.dialed, "only the public address of a name is dialed")
	_, err = g.DialContext(ctx, "tcp", "public.example:443")
	require.ErrorIs(t, err, errStubDial)
	require.Equal(t, "93.184.216.34:443", stub.dialed[1])

	allowing := &webhooks.Guard{Resolver: resolver, Dialer: stub, AllowPrivate: true}
	_, err = allowing.DialContext(ctx, "tcp", "hooks.internal.example:443")
	require.ErrorIs(t, err, errStubDial, "--allow-private lets it through")
	require.Equal(t, "10.0.0.1:443", stub.dialed[2])

	// The system dialer's Control function refuses too, should anything
	// reach it with a private address.
	_, err = webhooks.NewGuard(false).Dialer.DialContext(ctx, "tcp", "127.0.0.1:9")
	require.ErrorIs(t, err, webhooks.ErrRefusedAddress)
}

var errStubDial = errors.New("stub dialer: not dialed")

// recordingDialer records what it is asked to dial and dials nothing.
type recordingDialer struct{ dialed []string }

func (r *recordingDialer) DialContext(_ context.Context, _, address string) (net.Conn, error) {
	r.dialed = append(r.dialed, address)
	return nil, errStubDial
}

// A delivery to an endpoint whose name resolves to a private address
// fails, saying why, and nothing is dialed; Create refuses a literal
// private address outright; a redirect is not followed.
func TestDeliveriesToPrivateTargetsAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	for _, url := range []string{"http://127.0.0.1:8080/hook", "http://169.254.169.254/latest/meta-data", "http://localhost/x", "http://[::1]/"} {
		_, err := store.Create(ctx, webhooks.NewEndpoint{URL: url, Events: []string{webhooks.RunEscalated}})
		require.Error(t, err, url)
		require.Contains(t, err.Error(), "--allow-private", url)
	}
	_, err := store.Create(ctx, webhooks.NewEndpoint{URL: "http://hooks.internal.example/x", Events: []string{webhooks.RunEscalated}})
	require.NoError(t, err, "a name is checked when it is dialed")

	other := newReceiver(t, nil)
	redirecting := newReceiver(t, func(int, *http.Request) int { return http.StatusFound })
	redirecting.Config.Handler = http.RedirectHandler(other.URL, http.StatusFound)
	endpoint(t, store, redirecting.URL)

	dialer := &loopbackOnly{t: t}
	c := newClock()
	d := webhooks.NewDeliverer(pool, webhooks.Options{Clock: c.Now, Dialer: dialer,
		Resolver: stubResolver{"hooks.internal.example": {netip.MustParseAddr("10.0.0.1")}}})
	escalate(t, runevents.New(pool), "wf-1", 1)
	drain(t, d, c, time.Second, 3)

	ds, err := store.Deliveries(ctx, webhooks.Filter{})
	require.NoError(t, err)
	require.Len(t, ds, 2)
	for _, x := range ds {
		require.Equal(t, webhooks.StatusFailed, x.Status)
		switch {
		case x.LastStatus == http.StatusFound:
			require.Contains(t, x.LastError, "redirects are not followed")
		default:
			require.Contains(t, x.LastError, "refused address")
			require.Contains(t, x.LastError, "10.0.0.1")
		}
	}
	require.Empty(t, other.requests(), "the redirect's target heard nothing")
	for _, a := range dialer.addresses() {
		require.True(t, strings.HasPrefix(a, "127.0.0.1:"), a)
	}
}
