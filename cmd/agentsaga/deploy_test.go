package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/workflows"
)

// deployFromCommit is the release the deploy test upgrades from: the last
// commit before the give-ups-together change (workflows/versions.go).
// Build A is built from it, build B from the working tree.
const deployFromCommit = "56852b8a2191008e82812b785afd2881a0a0bbd0"

const (
	nsDeploy         = "deploy"
	deployDeployment = "agentsaga"
)

// deployTools are a charge (an effect, idempotent by key) at %[1]s and a
// lookup at %[2]s that finds nothing (404), both with 30 s attempts.
const deployTools = `
tools:
  - name: charge
    kind: http
    url: %[1]s/charge
    timeout_seconds: 30
    parameters: {type: object, properties: {customer: {type: string}, amount: {type: number}}, required: [customer, amount]}
  - name: lookup
    kind: http
    url: %[2]s/lookup
    timeout_seconds: 30
    parameters: {type: object, properties: {id: {type: string}}, required: [id]}
`

// deployRun is one run of the deploy test and what it should show.
type deployRun struct {
	id     string
	script string
	// waits says the run escalates on build A and is resumed on build B.
	waits bool
	// startsOnB says the run is started after the deploy.
	startsOnB bool
	// giveUps, when set, is the give-ups-together version the run's
	// execution must have taken for the two lookups it gives up.
	giveUps *workflow.Version
}

// A deploy while runs are in flight, with real processes: runs start on
// build A (the release before a change behind GetVersion), some waiting
// for a human and one in the middle of a 30 s tool call; A is stopped with
// SIGTERM and build B, the working tree, starts as the deployment's
// current build. The waiting runs are resumed and finish on B, the one
// mid-run finishes on B, and a run started on B takes the new path while
// the one started on A keeps the old. After it: 0 non-determinism errors,
// 0 failed workflow tasks, 0 duplicate effects.
//
// It is not parallel: it runs before the package's parallel tests, so its
// two builds and its dev server do not load the chaos harness's timings.
func TestDeployWithRunsInFlight(t *testing.T) {
	dir := t.TempDir()
	binB := buildAgentsaga(t)
	binA := buildAgentsagaAt(t, filepath.Join(dir, "release"), deployFromCommit)
	// The five minutes are the deploy's, not the builds': on a cold build
	// cache beside make test's other packages the release alone once took
	// 4m41s to compile.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	temporal := startTemporalServer(t, dir, nsDeploy)
	c := temporal.client(t, nsDeploy)
	databaseURL := agentsagatest.NewDatabase(t)
	store, err := ledgerdb.Open(ctx, databaseURL)
	require.NoError(t, err)
	defer store.Close()

	midRun := "deploy-mid-run"
	charges := startToolServer(t, midRun+"/step-001-call-1-charge")
	// The first lookup of a turn answers 2 s after the second, so the new
	// path gives the second up while the first still runs.
	nothing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Idempotency-Key"), "-call-1-lookup") {
			time.Sleep(2 * time.Second)
		}
		http.Error(w, `{"error":"no such record"}`, http.StatusNotFound)
	}))
	defer nothing.Close()

	old, current := workflow.DefaultVersion, workflow.Version(1)
	chargeTwice := func(customer string) string {
		return fmt.Sprintf("    - tool_calls: [{name: charge, arguments: {customer: %[1]s, amount: 10}}]\n"+
			"    - refusal: the second charge needs a human's go-ahead\n"+
			"    - tool_calls: [{name: charge, arguments: {customer: %[1]s, amount: 20}}]\n"+
			"    - content: charged %[1]s twice\n", customer)
	}
	lookUps := "    - tool_calls: [{name: lookup, arguments: {id: rec-1}}, {name: lookup, arguments: {id: rec-2}}]\n"
	runs := []deployRun{
		{id: "deploy-waiting-ann", script: chargeTwice("ann"), waits: true},
		{id: "deploy-waiting-bob", script: chargeTwice("bob"), waits: true},
		{id: "deploy-waiting-cat", script: chargeTwice("cat"), waits: true},
		// Its give-ups happen on A, before it waits: B must replay them.
		{id: "deploy-waiting-lookups", script: lookUps + "    - refusal: I found nothing; what now?\n    - content: found nothing\n", waits: true, giveUps: &old},
		{id: midRun, script: "    - tool_calls: [{name: charge, arguments: {customer: dan, amount: 30}}]\n    - content: charged dan\n"},
		{id: "deploy-new-lookups", script: lookUps + "    - content: found nothing\n", startsOnB: true, giveUps: &current},
	}
	start := func(r deployRun) client.WorkflowRun {
		spec, err := workflows.ParseSpec([]byte("goal: " + r.id + "\nbudget: {steps: 6}\nmodel:\n  provider: scripted\n  script:\n" +
			r.script + fmt.Sprintf(deployTools, charges.URL, nothing.URL)))
		require.NoError(t, err, r.id)
		spec, err = spec.Resolve()
		require.NoError(t, err, r.id)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: r.id, TaskQueue: workflows.TaskQueue}, workflows.AgentRun, spec)
		require.NoError(t, err, r.id)
		return run
	}
	startBuild := func(build, bin string) *process {
		w := startWorkerProcess(t, bin, "worker-"+build, temporal.address(), nsDeploy, databaseURL,
			"--deployment", deployDeployment, "--build-id", build, "--versioning", "auto-upgrade")
		setCurrentVersion(ctx, t, c, build, w)
		return w
	}

	// Build A: the runs start, and wait for a human or for the held call.
	workerA := startBuild("A", binA)
	handles := map[string]client.WorkflowRun{}
	for _, r := range runs {
		if !r.startsOnB {
			handles[r.id] = start(r)
		}
	}
	for _, r := range runs {
		if r.waits {
			waitForLedgerStatus(ctx, t, store, r.id, agentsagatype.RunEscalated)
		}
	}
	charges.waitHeld(ctx, t)

	// The deploy: A stops as an orchestrator stops it, then B starts.
	require.NoError(t, workerA.stop(30*time.Second))
	charges.releaseHeld()
	workerB := startBuild("B", binB)
	defer func() { _ = workerB.stop(30 * time.Second) }()

	for _, r := range runs {
		switch {
		case r.startsOnB:
			handles[r.id] = start(r)
		case r.waits:
			update, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: r.id, UpdateName: workflows.UpdateResume,
				Args: []any{workflows.ResumeInput{Message: "go ahead"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err == nil {
				err = update.Get(ctx, nil)
			}
			if err != nil {
				execution, _ := agentsagatest.ReadExecution(ctx, c, r.id, "")
				t.Fatalf("resume %s on build B: %v (%d failed workflow tasks, %d of them non-determinism errors)", r.id, err, execution.FailedTasks, execution.Nondeterministic)
			}
		}
	}

	var failedTasks, nondeterministic int
	for _, r := range runs {
		var result workflows.RunResult
		require.NoError(t, handles[r.id].Get(ctx, &result), "%s\n%s", r.id, workerB.log())
		require.Equal(t, agentsagatype.RunCompleted, result.Status, "%s: %s", r.id, result.Reason)

		execution, err := agentsagatest.ReadExecution(ctx, c, r.id, handles[r.id].GetRunID())
		require.NoError(t, err)
		failedTasks, nondeterministic = failedTasks+execution.FailedTasks, nondeterministic+execution.Nondeterministic
		builds := execution.Builds
		wantFirst := map[bool]string{false: "A", true: "B"}[r.startsOnB]
		require.Equal(t, wantFirst, builds[0], "%s started on build %s (workflow tasks by build: %v)", r.id, wantFirst, builds)
		require.Equal(t, "B", builds[len(builds)-1], "%s finished on build B (workflow tasks by build: %v)", r.id, builds)
		if r.giveUps != nil {
			version, recorded := execution.Version["give-ups-together"]
			if !recorded {
				version = workflow.DefaultVersion
			}
			if execution.Version["agentsaga-commands"] >= 1 {
				// Today's executions record one change ID for every change
				// since the first three; it implies give-ups-together.
				version = current
			}
			require.Equal(t, *r.giveUps, version, r.id)
			require.Equal(t, 2, execution.GiveUps, r.id)
			require.Equal(t, *r.giveUps == current, execution.GaveUpAhead, "%s: a call given up while an earlier one still ran", r.id)
		}
	}
	counts := charges.counts()
	requests, executions, duplicates := counts.totals()
	t.Logf("deploy A -> B with %d runs in flight: %d non-determinism errors, %d failed workflow tasks, %d duplicate effects (%d charges executed, %d requests)",
		len(runs), nondeterministic, failedTasks, duplicates, executions, requests)
	require.Zero(t, nondeterministic, "non-determinism errors")
	require.Zero(t, failedTasks, "failed workflow tasks")
	require.Zero(t, duplicates, "duplicate effects: %v", counts.executions)
	require.Equal(t, 3*2+1, executions, "every charge happened once: %v", counts.executed)
}

// setCurrentVersion makes build the current version of the deployment, as
// `temporal worker deployment set-current-version` does, once its worker w
// has polled (the server learns of a version from its workers' polls).
func setCurrentVersion(ctx context.Context, t *testing.T, c client.Client, build string, w *process) {
	t.Helper()
	handle := c.WorkerDeploymentClient().GetHandle(deployDeployment)
	for {
		_, err := handle.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: build})
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("make build %s current in deployment %s: %v\n%s", build, deployDeployment, err, w.log())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// buildAgentsagaAt returns the agentsaga binary of an earlier commit, built
// from the git history of the repository that holds the working directory.
// The binary is a function of the commit and the Go toolchain alone, so it
// is kept in the user's cache directory under both (releaseCachePath): a
// warm machine's make test linked it again each time, 18-29 s of phase 1's
// busy CPU. Deleting that directory makes the next run build it again.
func buildAgentsagaAt(t *testing.T, dir, commit string) string {
	t.Helper()
	cached, err := releaseCachePath(commit)
	if err != nil {
		t.Logf("the release's binary is not cached: %v", err)
	} else if info, err := os.Stat(cached); err == nil && info.Mode().IsRegular() {
		t.Logf("release %s from the cache: %s", commit[:7], cached)
		return cached
	}
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err, "the deploy test builds release %s from git history and needs git and a clone", commit)
	repo := strings.TrimSpace(string(root))
	if out, err := exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("the deploy test builds release %s from git history, and this clone lacks it (shallow? git fetch --unshallow): %v %s", commit, err, out)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", repo, commit, dir)
	out, err := archive.CombinedOutput()
	require.NoError(t, err, "git archive %s: %s", commit, out)
	bin := filepath.Join(dir, "agentsaga")
	startedAt := time.Now()
	build := exec.Command("go", "build", "-ldflags=-s -w", "-o", bin, "./cmd/agentsaga")
	build.Dir = dir
	// -trimpath, as make test builds everything: the release is unpacked
	// in a new temporary directory each time, and without it Go's build
	// cache keys the release's packages by that directory, so every run
	// compiled the whole release again.
	build.Env = append(os.Environ(), "GOFLAGS=-trimpath -mod=readonly -buildvcs=false")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/agentsaga at %s: %s", commit, out)
	t.Logf("built release %s in %s", commit[:7], time.Since(startedAt).Round(time.Millisecond))
	if cached != "" {
		if err := copyExecutable(bin, cached); err != nil {
			t.Logf("the release's binary is not cached: %v", err)
		}
	}
	return bin
}

// releaseCachePath is where the binary of commit, built by the go on PATH,
// is kept: $XDG_CACHE_HOME/agentsaga-test (or ~/.cache/agentsaga-test),
// under the commit, the toolchain's version and the platform.
func releaseCachePath(commit string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	version, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	name := fmt.Sprintf("release-%s-%s-%s_%s", commit, strings.TrimSpace(string(version)), runtime.GOOS, runtime.GOARCH)
	return filepath.Join(base, "agentsaga-test", name, "agentsaga"), nil
}

// copyExecutable copies the file from to the path to, through a temporary
// file renamed into place, so that a test running beside this one (another
// clone's make test) reads either no file there or the whole of it.
func copyExecutable(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(to), ".agentsaga-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // once renamed, there is nothing left to remove
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), to)
}

// waitForLedgerStatus waits until the ledger says the run is status.
func waitForLedgerStatus(ctx context.Context, t *testing.T, store *ledgerdb.Store, id, status string) {
	t.Helper()
	err := pollUntil(ctx, id+" "+status, 100*time.Millisecond, func() bool {
		run, err := store.GetRun(ctx, id)
		return err == nil && run.Status == status
	})
	require.NoError(t, err)
}
