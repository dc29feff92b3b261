package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/ledger/ledgertest"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/worker/workertest"
	"github.com/agentsaga/agentsaga/workflows"
)

func TestUIExplore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	server, uiURL, err := workertest.StartDevServerWithUI(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = server.Stop() })
	t.Log(uiURL)
	store := ledgertest.NewStore(t)
	w, err := worker.New(ctx, server.Client(), store, worker.Options{TaskQueue: workflows.TaskQueue})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	spec, err := workflows.ParseSpec([]byte(`
goal: count the words in the operator's note
search_attributes: true
budget: {steps: 4}
model:
  provider: scripted
  script:
    - tool_calls: [{name: word_count, arguments: {text: "the quick brown fox"}}]
    - content: the note has 4 words
tools:
  - {name: word_count, kind: go, parameters: {type: object, properties: {text: {type: string}}, required: [text]}}
`))
	require.NoError(t, err)
	run, err := server.Client().ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "ui-run", TaskQueue: workflows.TaskQueue, StaticSummary: spec.Goal}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	t.Logf("%+v", result.Status)

	actx, acancel := chromedp.NewExecAllocator(ctx, chromedp.ExecPath("/usr/bin/chromium"), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	for i, u := range []string{uiURL + "/namespaces/default/workflows/ui-run", uiURL + "/namespaces/default/workflows"} {
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(u), chromedp.Sleep(6*time.Second)))
		text, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
		require.NoError(t, err)
		loc, _ := chromedp.Run(bctx, chromedp.Location())
		t.Logf("=== %s (%s)\n%s", u, loc, text)
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile("/tmp/uiexplore/"+string(rune('a'+i))+".png", png, 0o644))
		html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.outerHTML`))
		require.NoError(t, os.WriteFile("/tmp/uiexplore/"+string(rune('a'+i))+".html", []byte(html), 0o644))
	}
}
