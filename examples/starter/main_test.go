package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
)

var devServer *testsuite.DevServer

func TestMain(m *testing.M) {
	agentsagatest.Main(m, func(server *testsuite.DevServer) { devServer = server })
}

func TestStartTwiceUnderOneID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := devServer.Client()
	store := agentsagatest.NewLedger(t)
	engine, err := agentsaga.New(ctx, store, agentsaga.Config{})
	require.NoError(t, err)
	w := worker.New(c, engine.TaskQueue(), engine.WorkerOptions(worker.Options{}))
	engine.Register(w)
	require.NoError(t, w.Start())
	defer w.Stop()

	id := agentsagatest.RunID(t)
	spec := agentsaga.RunSpec{Goal: "say hi", Budget: agentsaga.Budget{Steps: 2}, Model: agentsagatest.Script(agentsagatest.Answer("hi"))}
	result, err := Start(ctx, c, store, id, spec)
	require.NoError(t, err)
	require.Equal(t, "completed", result.Status)
	require.Equal(t, "hi", result.Answer)

	_, err = Start(ctx, c, store, id, spec)
	var exists *agentsaga.RunExistsError
	require.ErrorAs(t, err, &exists)
}
