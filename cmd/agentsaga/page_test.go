package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/workflows"
)

// pageSnapshot is what the test reads off a run's live page.
type pageSnapshot struct {
	Status  string   `json:"status"`
	Texts   []string `json:"texts"`
	Buttons []string `json:"buttons"`
	Ending  string   `json:"ending"`
	Body    string   `json:"body"`
}

const pageSnapshotJS = `(() => ({
  status: document.getElementById('status').textContent,
  texts: [...document.querySelectorAll('.text')].map(e => e.textContent),
  buttons: [...document.querySelectorAll('button[data-call]')].map(b => b.textContent + ' ' + b.dataset.call),
  ending: document.getElementById('ending').hidden ? '' : document.getElementById('ending').innerText,
  body: document.body.innerText,
}))()`

// The live page in real Chromium: asked for a key, it shows the model's
// text as text_delta events publish it (an attempt discarded part-way is
// dropped), and its Approve button sends the decision, under the key's
// name, after which the run goes on to its end, which the page shows.
func TestTheLivePageShowsTextAndApproves(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("chromium is not installed: run `make chromium` (%v)", err)
	}
	base, key, store := apiWorld(t)
	bank, wires := startBank(t)
	status, run := call(t, "POST", base+"/v1/runs?id=page-run", key, paySupplierSpec(bank, "paid"))
	require.Equal(t, http.StatusCreated, status, "%v", run)
	// The model's text, as the streaming turns publish it (issue 33 item
	// 1): a first attempt that died part-way, then the second's.
	log := runevents.New(ledgerdb.Of(store).Pool())
	delta := func(key string, attempt int, text string) runevents.Event {
		data, _ := json.Marshal(runevents.Delta{Attempt: attempt, Text: text})
		return runevents.Event{Key: key, Kind: runevents.TextDelta, CallKey: "page-run/step-001-model", Data: data}
	}
	discarded, _ := json.Marshal(runevents.Discarded{Attempt: 1, Why: "connection reset"})
	_, err := log.Publish(context.Background(), "page-run", delta("d1", 1, "Paying the wr"),
		runevents.Event{Key: "x1", Kind: runevents.AttemptDiscarded, CallKey: "page-run/step-001-model", Data: discarded},
		delta("d2", 2, "Paying the supplier, "), delta("d3", 2, "once approved."))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()))
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/runs/page-run"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), key),
		chromedp.Click(chromedp.CSS("#watch")),
	))
	page := waitForPage(browser, t, "the streamed text and an Approve button", func(s pageSnapshot) bool {
		return len(s.Texts) > 0 && len(s.Buttons) == 2
	})
	assert.Contains(t, page.Texts, "Paying the supplier, once approved.")
	assert.NotContains(t, page.Body, "Paying the wr", "the discarded attempt's text is dropped")
	assert.Contains(t, page.Body, "attempt 1 was discarded: connection reset")
	assert.Zero(t, wires.Load())

	require.NoError(t, chromedp.Do(browser, chromedp.Click(chromedp.CSS(`button.approve[data-call]`))))
	page = waitForPage(browser, t, "the run's ending", func(s pageSnapshot) bool { return s.Ending != "" })
	assert.Contains(t, page.Ending, "completed")
	assert.Contains(t, page.Ending, "paid")
	assert.Equal(t, "completed", page.Status)
	assert.Contains(t, page.Body, "approved by support-app")
	assert.Equal(t, int32(1), wires.Load(), "the approved wire went out once")
	approvals, err := ledgerdb.Of(store).RunApprovals(context.Background(), "page-run")
	require.NoError(t, err)
	require.Len(t, approvals, 1)
	assert.Equal(t, "support-app", approvals[0].DecidedBy)
	var result workflows.RunResult
	require.NoError(t, devServer.Client().GetWorkflow(ctx, "page-run", "").Get(ctx, &result))
	assert.Equal(t, "paid", result.Answer)
}

// waitForPage reads the page until ready holds, for at most 30 seconds.
func waitForPage(browser context.Context, t *testing.T, what string, ready func(pageSnapshot) bool) pageSnapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, 30*time.Second)
	defer cancel()
	var last pageSnapshot
	for {
		if s, err := chromedp.Run(ctx, chromedp.Evaluate[pageSnapshot](pageSnapshotJS)); err == nil {
			last = s
			if ready(s) {
				return s
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the live page did not show %s; it showed:\n%s", what, strings.TrimSpace(last.Body))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
