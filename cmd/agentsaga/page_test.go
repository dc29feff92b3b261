package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/dataset"
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
	Replay  string   `json:"replay"`
	Body    string   `json:"body"`
}

const pageSnapshotJS = `(() => ({
  status: document.getElementById('status').textContent,
  texts: [...document.querySelectorAll('.text')].map(e => e.textContent),
  buttons: [...document.querySelectorAll('button[data-call]')].map(b => b.textContent + ' ' + b.dataset.call),
  ending: document.getElementById('ending').hidden ? '' : document.getElementById('ending').innerText,
  replay: document.getElementById('replay').hidden ? '' : document.getElementById('replay').innerText,
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
	browser := openPage(ctx, t, base+"/runs/page-run", key)
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
	assert.Empty(t, page.Replay, "a run that is not a replay has no report")
	assert.Equal(t, int32(1), wires.Load(), "the approved wire went out once")
	approvals, err := ledgerdb.Of(store).RunApprovals(context.Background(), "page-run")
	require.NoError(t, err)
	require.Len(t, approvals, 1)
	assert.Equal(t, "support-app", approvals[0].DecidedBy)
	var result workflows.RunResult
	require.NoError(t, devServer.Client().GetWorkflow(ctx, "page-run", "").Get(ctx, &result))
	assert.Equal(t, "paid", result.Answer)
}

// openPage opens url in a headless Chromium of its own, gone when ctx
// is, and gives the page key.
func openPage(ctx context.Context, t *testing.T, url, key string) context.Context {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()))
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), key),
		chromedp.Click(chromedp.CSS("#watch")),
	))
	return browser
}

// A replay's live page shows its report against the run it replays: the
// divergence (in a sub-agent, at its turn 1: "2.1"), the calls side by
// side, and the answers, as text: an answer that looks like HTML is not
// made into any.
func TestTheLivePageShowsAReplaysReport(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("chromium is not installed: run `make chromium` (%v)", err)
	}
	base, key, store := apiWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := func(lookup map[string]any) json.RawMessage {
		raw, err := json.Marshal(map[string]any{"goal": "refund A-1", "budget": map[string]any{"account": "acme"},
			"tools": []any{lookup, map[string]any{"name": "ask", "kind": "agent"}}})
		require.NoError(t, err)
		return raw
	}
	recorded := spec(map[string]any{"name": "lookup", "kind": "http", "url": "http://127.0.0.1:1/lookup"})
	replayAs := func(id string) json.RawMessage {
		return spec(map[string]any{"name": "lookup", "kind": "recorded",
			"recording": map[string]any{"source": "page-src", "replay": id, "match": "in-order"}})
	}
	replayed := replayAs("replay-page-src-1")
	lookup := func(step int, order string, sent bool) dataset.Call {
		c := dataset.Call{Step: step, Tool: "lookup", Arguments: json.RawMessage(`{"order":"` + order + `"}`), Sent: sent}
		if sent {
			c.Output = `{"total":40}`
		}
		return c
	}
	// Each run's sub-agent is nested in the call that started it, as a
	// dataset holds it, and imported under that call's key.
	ask := func(spec json.RawMessage, calls ...dataset.Call) dataset.Call {
		return dataset.Call{Step: 2, Tool: "ask", Arguments: json.RawMessage(`{"question":"refund?"}`), Sent: true, Output: "yes",
			Agent: &dataset.Entry{Goal: "refund?", Spec: spec, Status: "completed", Answer: "yes", Steps: 2, Calls: calls}}
	}
	for id, e := range map[string]dataset.Entry{
		"page-src": {Goal: "refund A-1", Spec: recorded, Status: "completed", Answer: "refunded 40", Steps: 3, Tokens: 300, USD: 0.01, WallMS: 1500,
			Calls: []dataset.Call{lookup(1, "A-1", true), ask(recorded, lookup(1, "A-1", true))}},
		"replay-page-src-1": {Goal: "refund A-1", Spec: replayed, Status: "completed", Answer: "<img src=x onerror=alert(1)>refunded 5000",
			Steps: 3, Tokens: 320, USD: 0.012, WallMS: 900, Calls: []dataset.Call{lookup(1, "A-1", true), ask(replayed, lookup(1, "Z-9", false))}},
	} {
		_, err := dataset.Import(ctx, ledgerdb.Of(store), id, e)
		require.NoError(t, err, id)
	}

	browser := openPage(ctx, t, base+"/runs/replay-page-src-1", key)
	page := waitForPage(browser, t, "the replay's report", func(s pageSnapshot) bool { return strings.Contains(s.Replay, "divergence") })
	assert.Contains(t, page.Replay, "Replay against page-src")
	assert.Contains(t, page.Replay, "1 divergence, first at turn 2")
	assert.Contains(t, page.Replay, `lookup {"order":"Z-9"} (not sent)`, "the sub-agent's call, beside its recording")
	assert.Regexp(t, `(?m)^2\.1\s+!arguments\s+lookup \{"order":"A-1"\} => \{"total":40\}`, page.Replay)
	assert.Contains(t, page.Replay, "<img src=x onerror=alert(1)>refunded 5000", "the answer is shown as text")
	assert.NotContains(t, page.Replay, "so far", "the replay had ended")
	images, err := chromedp.Run(browser, chromedp.Evaluate[int](`document.images.length`))
	require.NoError(t, err)
	assert.Zero(t, images)
	login, err := chromedp.Run(browser, chromedp.Evaluate[string](`getComputedStyle(document.getElementById('login')).display`))
	require.NoError(t, err)
	assert.Equal(t, "none", login, "the key form goes once a key is given")

	// A replay still running shows its report so far, and the page reads
	// it again when the run ends. (The tab keeps its key.)
	db := ledgerdb.Of(store)
	require.NoError(t, db.StartRun(ctx, agentsagatype.Run{WorkflowID: "replay-page-src-2", RunID: "r", Goal: "refund A-1", Spec: replayAs("replay-page-src-2")}))
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(base+"/runs/replay-page-src-2")))
	page = waitForPage(browser, t, "the running replay's report", func(s pageSnapshot) bool { return strings.Contains(s.Replay, "so far") })
	assert.Contains(t, page.Replay, "2 divergences, first at turn 1 so far (the replay has not ended: its status is running)")
	assert.Regexp(t, `status\s+completed\s+running`, page.Replay)
	// A call of the running replay ends: the page reads the report again.
	_, err = db.Pool().Exec(ctx, `UPDATE runs SET steps_used = 7 WHERE workflow_id = 'replay-page-src-2'`)
	require.NoError(t, err)
	_, err = runevents.New(db.Pool()).Publish(ctx, "replay-page-src-2",
		runevents.Event{Key: "replay-page-src-2/tool-1", Kind: runevents.ToolFinished, Data: json.RawMessage(`{"tool":"lookup","outcome":"ok"}`)})
	require.NoError(t, err)
	page = waitForPage(browser, t, "the running replay's report after a call", func(s pageSnapshot) bool {
		return regexp.MustCompile(`steps\s+\d+\s+7 `).MatchString(s.Replay)
	})
	assert.Contains(t, page.Replay, "so far")
	require.NoError(t, db.FinishRun(ctx, "replay-page-src-2", agentsagatype.RunOutcome{Status: "failed", Reason: "stopped", StepsUsed: 1}))
	finished, err := json.Marshal(map[string]any{"status": "failed", "reason": "stopped", "steps": 1})
	require.NoError(t, err)
	_, err = runevents.New(db.Pool()).Publish(ctx, "replay-page-src-2",
		runevents.Event{Key: "replay-page-src-2/finished", Kind: runevents.RunFinished, Data: finished})
	require.NoError(t, err)
	page = waitForPage(browser, t, "the ended replay's report", func(s pageSnapshot) bool { return s.Ending != "" && !strings.Contains(s.Replay, "so far") })
	assert.Regexp(t, `status\s+completed\s+failed`, page.Replay)
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
