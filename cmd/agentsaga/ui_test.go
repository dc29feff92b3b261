package main

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// chromiumPath is Debian's Chromium, which `make chromium` installs.
const chromiumPath = "/usr/bin/chromium"

// uiSnapshot is what the test reads off a page of the Temporal web UI.
type uiSnapshot struct {
	// Header is the workflow page's header: status badge, workflow ID, tabs.
	Header string `json:"header"`
	// Summary and CurrentDetails are the Markdown the User Metadata tab
	// renders, each in its own same-origin iframe under its heading.
	Summary        string `json:"summary"`
	CurrentDetails string `json:"currentDetails"`
	// SearchAttributes is the Search Attributes tab's JSON.
	SearchAttributes string `json:"searchAttributes"`
	// Rows are the rows of the workflow list.
	Rows []string `json:"rows"`
	// Main is the page's main content, for failure messages.
	Main string `json:"main"`
}

const snapshotJS = `(() => {
  const text = el => (el ? el.innerText.trim() : '');
  const heading = title => [...document.querySelectorAll('h1,h2,h3,h4')].find(e => e.textContent.trim() === title);
  const frameAfter = title => {
    const h = heading(title);
    if (!h) return '';
    const f = [...document.querySelectorAll('iframe')].find(f => h.compareDocumentPosition(f) & Node.DOCUMENT_POSITION_FOLLOWING);
    const body = f && f.contentDocument && f.contentDocument.body;
    return text(body);
  };
  const section = title => { const h = heading(title); return h ? text(h.parentElement) : ''; };
  const id = document.querySelector('[data-testid="workflow-id-heading"]');
  return {
    header: text(id && id.closest('header')),
    summary: frameAfter('Summary'),
    currentDetails: frameAfter('Current Details'),
    searchAttributes: section('Search Attributes'),
    rows: [...document.querySelectorAll('tr[data-testid="workflows-summary-configurable-table-row"]')].map(text),
    main: text(document.querySelector('main') || document.body),
  };
})()`

// An operator finds a finished run in the Temporal web UI, in real Chromium:
// its status, its summary (the goal), its current details (the budget note
// and counters) and its typed search attributes, and can filter the
// workflow list by AgentStatus.
func TestRunIsVisibleInTheTemporalUI(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("chromium is not installed: run `make chromium` (%v)", err)
	}
	// The whole test, browser included, lives in ctx. Alone it takes about
	// 30 s; under the suite's load three runs of it ran out of 50 s while
	// they waited for a list of runs (53 s in all, each of them).
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	options, err := agentsagatest.DevServerOptions()
	require.NoError(t, err)
	options.EnableUI, options.UIPort = true, strconv.Itoa(freeTCPPort(t))
	server, err := testsuite.StartDevServer(ctx, options)
	require.NoError(t, err)
	t.Cleanup(func() { _ = server.Stop() })
	uiURL := "http://127.0.0.1:" + options.UIPort
	require.Eventually(t, func() bool {
		resp, err := http.Get(uiURL)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the dev server's UI at %s answers", uiURL)
	store := agentsagatest.NewLedger(t)
	w, err := worker.New(ctx, server.Client(), store, worker.Options{Config: agentsaga.Config{TaskQueue: workflows.TaskQueue}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	const goal = "count the words in the release note"
	spec, err := workflows.ParseSpec([]byte(`
goal: ` + goal + `
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
	run, err := server.Client().ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: "ui-run", TaskQueue: workflows.TaskQueue, StaticSummary: goal,
	}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	require.Equal(t, agentsagatype.RunCompleted, result.Status)

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 900),
	)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	// The first action starts the browser; it lives as long as ctx.
	require.NoError(t, chromedp.Do(browser, chromedp.EmulateViewport(1400, 900)))

	// The run's page: the UI resolves the latest run and shows its history.
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(uiURL+"/namespaces/default/workflows/ui-run")))
	page := waitForUI(browser, t, "the run's page header", func(s uiSnapshot) bool {
		return strings.Contains(s.Header, "ui-run") && strings.Contains(s.Header, "Completed")
	})
	assert.Contains(t, page.Header, "Completed", "the header's status badge")

	// The User Metadata tab: the summary and the current details, rendered
	// from Markdown.
	clickTab(browser, t, "user-metadata-tab")
	page = waitForUI(browser, t, "the summary and the current details", func(s uiSnapshot) bool {
		return strings.Contains(s.Summary, goal) && strings.Contains(s.CurrentDetails, "BUDGET LEFT")
	})
	t.Logf("the UI's current details:\n%s", page.CurrentDetails)
	assert.Equal(t, goal, page.Summary)
	assert.True(t, strings.HasPrefix(page.CurrentDetails, "completed"), "the details' heading is the status: %q", page.CurrentDetails)
	assert.Contains(t, page.CurrentDetails, "the model answered")
	assert.Contains(t, page.CurrentDetails, "BUDGET LEFT: 2 steps")
	assert.Contains(t, page.CurrentDetails, "leaf calls 3")
	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	shotPath := filepath.Join(t.TempDir(), "run.png")
	require.NoError(t, os.WriteFile(shotPath, shot, 0o644))
	require.NoError(t, os.WriteFile("/tmp/agentsaga-ui.png", shot, 0o644))
	t.Logf("screenshot of the User Metadata tab: %s (copied to /tmp/agentsaga-ui.png)", shotPath)

	// The Search Attributes tab: the typed attributes the run upserted.
	clickTab(browser, t, "search-attributes-tab")
	page = waitForUI(browser, t, "the search attributes", func(s uiSnapshot) bool {
		return strings.Contains(s.SearchAttributes, `"AgentStatus"`)
	})
	t.Logf("the UI's search attributes:\n%s", page.SearchAttributes)
	assert.Contains(t, page.SearchAttributes, `"AgentStatus": "completed"`)
	assert.Contains(t, page.SearchAttributes, `"StepsUsed": 2`)
	assert.Contains(t, page.SearchAttributes, `"LeafCalls": 3`)

	// The workflow list, filtered by the attribute as an operator would.
	// The list is Temporal's visibility, which learns of the run's last
	// upsert after the run's own page shows it, and the UI reads it once
	// as the page loads: under the suite's load it once loaded before
	// visibility had the run, and showed no rows for good. So the server's
	// own list must have the run first.
	require.Eventually(t, func() bool {
		list, err := server.Client().ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: "default", Query: `AgentStatus="completed"`})
		return err == nil && len(list.GetExecutions()) == 1
	}, 30*time.Second, 200*time.Millisecond, "visibility lists the completed run")
	listURL := uiURL + "/namespaces/default/workflows?query="
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(listURL+url.QueryEscape(`AgentStatus="completed"`))))
	page = waitForUI(browser, t, `the list filtered by AgentStatus="completed"`, func(s uiSnapshot) bool {
		return len(s.Rows) > 0
	})
	require.Len(t, page.Rows, 1, page.Main)
	assert.Contains(t, page.Rows[0], "ui-run")
	assert.Contains(t, page.Rows[0], "Completed")
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(listURL+url.QueryEscape(`AgentStatus="escalated"`))))
	page = waitForUI(browser, t, `the list filtered by AgentStatus="escalated"`, func(s uiSnapshot) bool {
		return strings.Contains(s.Main, "No Results")
	})
	assert.Empty(t, page.Rows)
}

// clickTab clicks a tab of the workflow page by its data-testid.
func clickTab(browser context.Context, t *testing.T, testID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, 10*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid="`+testID+`"]`))), "click %s", testID)
}

// uiLimit bounds each wait for the UI: a page loads the whole Svelte app
// anew, which under the suite's load takes seconds. A wait ends as soon as
// what it waits for shows.
const uiLimit = 30 * time.Second

// waitForUI reads the page until ready holds, for at most uiLimit. The UI is
// a Svelte app that renders after its API calls answer, and Markdown in
// iframes that load after that.
func waitForUI(browser context.Context, t *testing.T, what string, ready func(uiSnapshot) bool) uiSnapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, uiLimit)
	defer cancel()
	var last uiSnapshot
	var lastErr error
	for {
		snapshot, err := chromedp.Run(ctx, chromedp.Evaluate[uiSnapshot](snapshotJS))
		if err == nil {
			last = snapshot
			if ready(snapshot) {
				return snapshot
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
				_ = os.WriteFile("/tmp/agentsaga-ui-failure.png", shot, 0o644)
			}
			location, _ := chromedp.Run(browser, chromedp.Location())
			t.Fatalf("the UI did not show %s within %s at %s (last error: %v; screenshot: /tmp/agentsaga-ui-failure.png); the page showed:\n%+v",
				what, uiLimit, location, lastErr, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
