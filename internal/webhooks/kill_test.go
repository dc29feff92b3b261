package webhooks_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// helperDB names the database of the delivering process that
// TestAKilledSenderLosesNothing starts and kills.
const helperDB = "AGENTSAGA_WEBHOOKS_HELPER_DB"

// TestHelperProcessDelivers is that process: it claims what is due and
// sends it, and is killed mid-send.
func TestHelperProcessDelivers(t *testing.T) {
	url := os.Getenv(helperDB)
	if url == "" {
		t.Skip("the delivering process of TestAKilledSenderLosesNothing")
	}
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	d := webhooks.NewDeliverer(pool, webhooks.Options{Owner: "doomed", Lease: 30 * time.Second, Dialer: &loopbackOnly{t: t}})
	_, _ = d.Pass(context.Background())
	t.Fatal("the receiver answered; this process should have been killed mid-send")
}

// kill -9 of the process that is sending a delivery loses nothing: once
// its lease passes, another process sends it again under the same
// webhook-id, and the attempt the dead one began is recorded as abandoned.
func TestAKilledSenderLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, url := newPoolURL(t)
	store := webhooks.NewStore(pool)
	inFlight := make(chan struct{}, 1)
	rc := newReceiver(t, func(n int, r *http.Request) int {
		if n == 1 {
			inFlight <- struct{}{}
			<-r.Context().Done() // never answers: its sender dies first
			return http.StatusOK
		}
		return http.StatusOK
	})
	e := endpoint(t, store, rc.URL)
	escalate(t, runevents.New(pool), "wf-1", 1)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessDelivers$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDB+"="+url)
	require.NoError(t, cmd.Start())
	select {
	case <-inFlight:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the helper process never sent the delivery")
	}
	require.NoError(t, cmd.Process.Kill()) // SIGKILL
	_ = cmd.Wait()

	c := newClock()
	d := webhooks.NewDeliverer(pool, webhooks.Options{Owner: "survivor", Clock: c.Now, Dialer: &loopbackOnly{t: t}})
	n, err := d.Pass(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the dead process's lease still holds")
	c.Advance(31 * time.Second)
	drain(t, d, c, time.Second, 3)

	reqs := rc.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, reqs[0].ID, reqs[1].ID, "sent again under the same webhook-id")
	require.NoError(t, verify(t, e.Secret, reqs[1]))
	ds, err := store.Deliveries(ctx, webhooks.Filter{Attempts: true})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, webhooks.StatusDelivered, ds[0].Status)
	require.Len(t, ds[0].Tries, 2)
	require.Equal(t, "doomed", ds[0].Tries[0].Owner)
	require.Contains(t, ds[0].Tries[0].Error, "abandoned")
	require.Equal(t, "survivor", ds[0].Tries[1].Owner)
	require.Equal(t, http.StatusOK, ds[0].Tries[1].StatusCode)
}
