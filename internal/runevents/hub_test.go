package runevents_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/runevents"
)

// A run's events notify the database's listeners only while a hub leases
// the run for its readers: a run nobody follows, and one whose lease ran
// out, wake nobody (every listener in the database would wake, the
// workers' admission and webhooks loops too). Notifications arrive in
// commit order, so a followed run's notification that comes first proves
// that the unfollowed run's publish before it sent none.
func TestEventsNotifyOnlyWhileTheirRunIsFollowed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := newPool(t)
	listener, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer listener.Close(context.Background())
	_, err = listener.Exec(ctx, "LISTEN "+runevents.Channel)
	require.NoError(t, err)
	next := func() string {
		t.Helper()
		n, err := listener.WaitForNotification(ctx)
		require.NoError(t, err)
		return n.Payload
	}

	log, hub := runevents.New(pool), runevents.NewHub(pool)
	_, stop, err := hub.Subscribe(ctx, "followed")
	require.NoError(t, err)
	defer stop()

	_, err = log.Publish(ctx, "alone", delta("a", "nobody reads this"))
	require.NoError(t, err)
	_, err = log.Publish(ctx, "followed", delta("a", "read live"))
	require.NoError(t, err)
	require.Equal(t, "followed", next(), "the first notification")

	// The lease runs out when nobody renews it (its process died).
	_, stopLapsed, err := hub.Subscribe(ctx, "lapsed")
	require.NoError(t, err)
	stopLapsed()
	_, err = pool.Exec(ctx, `UPDATE run_event_readers SET until = clock_timestamp() - interval '1 second' WHERE workflow_id = 'lapsed'`)
	require.NoError(t, err)
	_, err = log.Publish(ctx, "lapsed", delta("a", "the reader is gone"))
	require.NoError(t, err)
	_, err = log.Publish(ctx, "followed", delta("b", "still read live"))
	require.NoError(t, err)
	require.Equal(t, "followed", next(), "the notification after the lapsed run's publish")

	// A run's events are stored and numbered all the same.
	events, err := log.Read(ctx, "alone", 0, 10)
	require.NoError(t, err)
	require.Len(t, events, 1)
}

// A running hub renews the leases of the runs its readers follow, so a
// run followed for longer than a lease goes on notifying, and lets a
// lease go once nobody follows the run.
func TestARunningHubRenewsItsLeases(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := newPool(t)
	const lease = 600 * time.Millisecond
	hub := runevents.NewHubWithLease(pool, lease)
	hubCtx, stopHub := context.WithCancel(ctx)
	defer stopHub()
	go hub.Run(hubCtx, func(err error) { t.Log(err) })

	_, stop, err := hub.Subscribe(ctx, "long")
	require.NoError(t, err)
	leased := func() bool {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT EXISTS (SELECT 1 FROM run_event_readers WHERE workflow_id = 'long' AND until > clock_timestamp())`).Scan(&ok))
		return ok
	}
	for range 4 { // two leases' time, read every half lease
		time.Sleep(lease / 2)
		require.True(t, leased(), "the followed run's lease lapsed")
	}
	stop()
	require.Eventually(t, func() bool { return !leased() }, 10*lease, lease/4, "the lease outlived its readers")
}
