package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/workflows"
)

// `make test-cluster` (scripts/test-cluster.sh) runs TestCluster against a
// real Temporal server, the one the temporalio/server image runs
// (go.temporal.io/server/cmd/server), built from Go modules, on Postgres
// for persistence and visibility, all services in one process, configured
// by deploy/temporal/config.yaml and deploy/temporal/dynamicconfig.yaml.
// The script builds the server and sets up its databases; this file starts
// the server (and restarts it, and swaps its dynamic config) the way the
// other tests start a dev server: with AGENTSAGA_CLUSTER_SERVER set,
// startTemporalServer starts this server instead, so the chaos harness,
// the fault tests and the deploy test run unchanged against it.

// clusterSettings is where the real server's binary and config are.
type clusterSettings struct {
	server string // the temporal-server binary
	root   string // the repository: --root, so --config deploy/temporal
	port   int    // the frontend's port (FRONTEND_GRPC_PORT)
}

// clusterFromEnv reads AGENTSAGA_CLUSTER_SERVER (the binary; unset: nil,
// the dev server), AGENTSAGA_CLUSTER_ROOT (default: this repository) and
// AGENTSAGA_CLUSTER_PORT (default 7333). The database variables the config
// file reads (POSTGRES_SEEDS, DB_PORT, POSTGRES_USER, POSTGRES_PWD, DBNAME,
// VISIBILITY_DBNAME) reach the server from this process's environment.
func clusterFromEnv(t *testing.T) *clusterSettings {
	t.Helper()
	server := os.Getenv("AGENTSAGA_CLUSTER_SERVER")
	if server == "" {
		return nil
	}
	server, err := filepath.Abs(server)
	require.NoError(t, err)
	root := os.Getenv("AGENTSAGA_CLUSTER_ROOT")
	if root == "" {
		root = "../.." // go test runs in cmd/agentsaga
	}
	root, err = filepath.Abs(root)
	require.NoError(t, err)
	port := 7333
	if raw := os.Getenv("AGENTSAGA_CLUSTER_PORT"); raw != "" {
		port, err = strconv.Atoi(raw)
		require.NoError(t, err, "AGENTSAGA_CLUSTER_PORT %q: want a port number", raw)
	}
	return &clusterSettings{server: server, root: root, port: port}
}

// The dynamic config the next cluster start uses: the repository's file
// (the tuned keepalive) unless a phase of TestCluster says otherwise.
var clusterConfig struct {
	mu            sync.Mutex
	dynamicConfig string
}

func clusterDynamicConfig(root string) string {
	clusterConfig.mu.Lock()
	defer clusterConfig.mu.Unlock()
	if clusterConfig.dynamicConfig != "" {
		return clusterConfig.dynamicConfig
	}
	return filepath.Join(root, "deploy", "temporal", "dynamicconfig.yaml")
}

func setClusterDynamicConfig(path string) {
	clusterConfig.mu.Lock()
	defer clusterConfig.mu.Unlock()
	clusterConfig.dynamicConfig = path
}

// clusterStartTimes records how long each start took to serve every
// namespace, for the report.
var clusterStartTimes struct {
	mu    sync.Mutex
	times []time.Duration
}

// startCluster starts the real server on s.port and waits until it
// answers and serves "default" and s.namespaces, registering those it
// lacks (a real server, unlike the dev server, has none of its own).
func (s *temporalServer) startCluster() error {
	c := s.cluster
	// A server left over from an earlier run would answer in this one's
	// place: refuse to start beside it.
	if l, err := net.Listen("tcp", s.address()); err != nil {
		return fmt.Errorf("temporal server: %s is taken (a temporal-server left running?): %w", s.address(), err)
	} else {
		l.Close()
	}
	dynamic := clusterDynamicConfig(c.root)
	env := []string{
		"FRONTEND_GRPC_PORT=" + strconv.Itoa(s.port),
		"BIND_ON_IP=127.0.0.1",
		"DYNAMIC_CONFIG_FILE_PATH=" + dynamic,
		"LOG_LEVEL=" + cmpOr(os.Getenv("LOG_LEVEL"), "warn"),
	}
	s.starts++
	began := time.Now()
	s.proc = startProcess(s.t, fmt.Sprintf("temporal server (start %d)", s.starts),
		filepath.Join(s.dir, "temporal-server.log"), env, c.server,
		"--root", c.root, "--config", "deploy/temporal", "--env", "config", "--allow-no-auth", "start")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl, err := dialWhenUp(ctx, s.address(), "default", s.proc)
	if err != nil {
		return fmt.Errorf("temporal server at %s: %w\n%s", s.address(), err, s.proc.log())
	}
	defer cl.Close()
	for _, ns := range append([]string{"default"}, s.namespaces...) {
		if err := ensureNamespace(ctx, cl, ns); err != nil {
			return fmt.Errorf("temporal server at %s: %w\n%s", s.address(), err, s.proc.log())
		}
	}
	took := time.Since(began)
	clusterStartTimes.mu.Lock()
	clusterStartTimes.times = append(clusterStartTimes.times, took)
	clusterStartTimes.mu.Unlock()
	s.t.Logf("temporal server (start %d) at %s with %s served %d namespaces %s after it started",
		s.starts, s.address(), filepath.Base(dynamic), len(s.namespaces)+1, took.Round(time.Millisecond))
	return nil
}

// ensureNamespace registers namespace unless it exists, and waits until
// the frontend serves it.
func ensureNamespace(ctx context.Context, c client.Client, namespace string) error {
	for {
		_, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
		var exists *serviceerror.NamespaceAlreadyExists
		if err == nil || errors.As(err, &exists) {
			break
		}
		// The frontend may answer before the services behind it do.
		select {
		case <-ctx.Done():
			return fmt.Errorf("register namespace %s: %w", namespace, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	for {
		_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s never served: %w", namespace, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func cmpOr(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// clusterPhase is one configuration TestCluster measures takeover in.
type clusterPhase struct {
	name string
	// dynamicConfig is the server's dynamic config file.
	dynamicConfig string
	// pollTimeout is the workers' AGENTSAGA_POLL_TIMEOUT ("": the default).
	pollTimeout string
	// enforceTakeover makes I5 fail the run; otherwise it is measured.
	enforceTakeover bool
	plan            []chaosCase
}

// clusterTakeovers collects the measured takeovers by phase and fault.
type clusterTakeovers struct {
	mu   sync.Mutex
	rows []clusterTakeoverRow
}

type clusterTakeoverRow struct {
	phase, cell string
	fault       chaosFault
	heartbeat   time.Duration
	takeover    time.Duration
	toPaused    int
}

// TestCluster runs, against the real server: agentsaga's search
// attributes registered on a fresh namespace (issue 23, item 3), two
// worker processes sharing runs while one is killed, the chaos harness's
// cases that matter most (worker kill -9 and SIGSTOP in a call, Postgres
// restarts), a server restart mid-call, and the deploy test with Worker
// Versioning. It measures takeover with the repository's dynamic config
// (frontend keepalive 1 s), with the server's defaults (what Temporal
// Cloud users get) and, to show what the worker's poll cap is for, with
// the defaults and the cap off. Every invariant of `make chaos` must hold
// with 0 violations; only in that last configuration is I5 measured rather
// than enforced.
func TestCluster(t *testing.T) {
	cluster := clusterFromEnv(t)
	if cluster == nil {
		t.Skip("runs against a real Temporal server: `make test-cluster` (AGENTSAGA_CLUSTER_SERVER names the temporal-server binary)")
	}
	began := time.Now()
	dir := t.TempDir()
	bin := buildAgentsaga(t)
	tuned := filepath.Join(cluster.root, "deploy", "temporal", "dynamicconfig.yaml")
	// Every key at the server's default: frontend.keepAliveTime 1 min,
	// frontend.keepAliveTimeout 10 s.
	defaults := filepath.Join(dir, "dynamicconfig-defaults.yaml")
	require.NoError(t, os.WriteFile(defaults, []byte("# No keys: every setting at the server's default.\n"), 0o644))
	report := &clusterReport{}

	t.Run("SearchAttributesOnAFreshNamespace", func(t *testing.T) {
		setClusterDynamicConfig(tuned)
		testClusterSearchAttributes(t, startTemporalServer(t, t.TempDir()), report)
	})
	t.Run("TwoWorkers", func(t *testing.T) {
		setClusterDynamicConfig(tuned)
		testClusterTwoWorkers(t, bin, startTemporalServer(t, t.TempDir(), "cluster-two-workers"), report)
	})
	t.Run("TemporalRestart", func(t *testing.T) {
		setClusterDynamicConfig(tuned)
		testTemporalRestart(t, bin)
	})
	t.Run("TemporalKilled", func(t *testing.T) {
		setClusterDynamicConfig(tuned)
		testTemporalRestartBy(t, bin, true)
	})
	if os.Getenv("AGENTSAGA_CLUSTER_SKIP_DEPLOY") == "" {
		t.Run("Deploy", func(t *testing.T) {
			setClusterDynamicConfig(tuned)
			TestDeployWithRunsInFlight(t)
		})
	}

	kill := func(b chaosBoundary, timeout int, ending string, run int) chaosCase {
		return chaosCase{Fault: faultKill, Boundary: b, Timeout: timeout, Ending: ending, Run: run}
	}
	pause := func(b chaosBoundary, timeout int, ending string, run int) chaosCase {
		return chaosCase{Fault: faultPause, Boundary: b, Timeout: timeout, Ending: ending, Run: run}
	}
	issue := issueScenario
	issue.Run = 1
	takeoverPlan := func(runs int) []chaosCase {
		var plan []chaosCase
		for run := 1; run <= runs; run++ {
			plan = append(plan,
				kill(boundaryDuringEffect, 3, endingCommit, run),
				kill(boundaryBeforeClaim, 3, endingCommit, run),
				pause(boundaryDuringEffect, 3, endingCommit, run),
				pause(boundaryBeforeClaim, 30, endingCommit, run),
				pause(boundaryAfterEffect, 30, endingAbort, run))
		}
		return plan
	}
	phases := []clusterPhase{
		{name: "tuned-keepalive", dynamicConfig: tuned, enforceTakeover: true, plan: append([]chaosCase{issue,
			kill(boundaryWaitingKey, 3, endingAbort, 1),
			kill(boundaryDuringWalk, 3, endingAbort, 1),
			{Fault: faultPostgres, Boundary: boundaryAfterEffect, Timeout: 3, Ending: endingAbort, Run: 1},
			{Fault: faultPostgres, Boundary: boundaryDuringEffect, Timeout: 3, Ending: endingCommit, Run: 1},
		}, takeoverPlan(1)...)},
		{name: "default-keepalive", dynamicConfig: defaults, enforceTakeover: true, plan: takeoverPlan(2)},
		{name: "default-keepalive-no-poll-cap", dynamicConfig: defaults, pollTimeout: "0", plan: takeoverPlan(1)},
	}
	takeovers := &clusterTakeovers{}
	for _, phase := range phases {
		t.Run("Chaos/"+phase.name, func(t *testing.T) {
			setClusterDynamicConfig(phase.dynamicConfig)
			if phase.pollTimeout != "" {
				t.Setenv("AGENTSAGA_POLL_TIMEOUT", phase.pollTimeout) // the worker processes inherit it
			}
			// Three at a time, not the small harness's five: on the shared
			// 2-core machine five runs (each with its workers, its tool and
			// its database) beside the server once ran Postgres out of
			// connections and held a fresh worker's start for 9 s, which
			// I5 then counted against the engine.
			parallel := 3
			if raw := os.Getenv("AGENTSAGA_CLUSTER_PARALLEL"); raw != "" {
				n, err := strconv.Atoi(raw)
				require.NoError(t, err, "AGENTSAGA_CLUSTER_PARALLEL %q", raw)
				parallel = n
			}
			namespaces := make([]string, min(parallel, len(phase.plan)))
			for i := range namespaces {
				namespaces[i] = fmt.Sprintf("cluster-%s-%d", phase.name, i)
			}
			phaseBegan := time.Now()
			temporal := startTemporalServer(t, t.TempDir(), namespaces...)
			outcomes := runChaosPlan(t, chaosEnv{bin: bin, temporal: temporal, takeoverMeasured: !phase.enforceTakeover},
				namespaces, phase.plan)
			table := chaosTable(phase.plan, outcomes)
			violations, over := 0, 0
			for _, o := range outcomes {
				for i, n := range o.Violations {
					if i == 4 && !phase.enforceTakeover {
						over += n
						continue
					}
					violations += n
				}
				if o.Err != "" {
					violations++ // a run that could not be checked is not a pass
				}
				if o.Takeover >= 0 {
					takeovers.add(clusterTakeoverRow{phase: phase.name, cell: o.Case.name(), fault: o.Case.Fault,
						heartbeat: o.Case.heartbeatTimeout(), takeover: o.Takeover, toPaused: o.ToPaused})
				}
			}
			report.addf("chaos, %s (%d runs in %s; dynamic config %s, AGENTSAGA_POLL_TIMEOUT=%q): %d invariant violations%s\n%s",
				phase.name, len(outcomes), time.Since(phaseBegan).Round(time.Second), filepath.Base(phase.dynamicConfig),
				phase.pollTimeout, violations, overNote(phase.enforceTakeover, over), table)
			if len(outcomes) != len(phase.plan) {
				t.Errorf("%d of %d runs reported", len(outcomes), len(phase.plan))
			}
			if violations > 0 {
				t.Errorf("%s: %d invariant violations or unchecked runs (the table above; each run's log has the evidence)", phase.name, violations)
			}
		})
	}
	setClusterDynamicConfig("")

	report.addf("%s", takeovers.summary())
	clusterStartTimes.mu.Lock()
	starts := append([]time.Duration(nil), clusterStartTimes.times...)
	clusterStartTimes.mu.Unlock()
	report.addf("temporal server starts: %d, each serving its namespaces within %s; TestCluster took %s",
		len(starts), durationRange(starts), time.Since(began).Round(time.Second))
	report.write(t)
}

func overNote(enforced bool, over int) string {
	if enforced {
		return ""
	}
	return fmt.Sprintf(" (I5 measured, not enforced: %d takeovers over the heartbeat timeout + 5 s)", over)
}

func (c *clusterTakeovers) add(row clusterTakeoverRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows = append(c.rows, row)
}

// summary is one line per phase, fault and heartbeat timeout: the
// takeovers measured, lowest to highest, and the retries handed to a
// paused worker.
func (c *clusterTakeovers) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	type key struct {
		phase     string
		fault     chaosFault
		heartbeat time.Duration
	}
	groups := map[key][]clusterTakeoverRow{}
	var keys []key
	for _, r := range c.rows {
		k := key{r.phase, r.fault, r.heartbeat}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	var b strings.Builder
	b.WriteString("takeover (from the kill or pause to the next attempt's request at the tool):\n")
	for _, k := range keys {
		rows := groups[k]
		var times []time.Duration
		toPaused := 0
		for _, r := range rows {
			times = append(times, r.takeover)
			toPaused += r.toPaused
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		var shown []string
		for _, d := range times {
			shown = append(shown, fmt.Sprintf("%.1fs", d.Seconds()))
		}
		fmt.Fprintf(&b, "  %-30s %-8s heartbeat timeout %-4s runs %d: %s (limit %s); retries handed to the paused worker: %d\n",
			k.phase, k.fault, k.heartbeat, len(rows), strings.Join(shown, " "), k.heartbeat+5*time.Second, toPaused)
	}
	return b.String()
}

func durationRange(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	lo, hi := ds[0], ds[0]
	for _, d := range ds {
		lo, hi = min(lo, d), max(hi, d)
	}
	return fmt.Sprintf("%.1f-%.1fs", lo.Seconds(), hi.Seconds())
}

// clusterReport is what TestCluster prints at the end, and writes to
// AGENTSAGA_CLUSTER_REPORT for the script to show.
type clusterReport struct {
	mu    sync.Mutex
	parts []string
}

func (r *clusterReport) addf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parts = append(r.parts, fmt.Sprintf(format, args...))
}

func (r *clusterReport) write(t *testing.T) {
	r.mu.Lock()
	text := strings.Join(r.parts, "\n")
	r.mu.Unlock()
	t.Logf("cluster report:\n%s", text)
	if path := os.Getenv("AGENTSAGA_CLUSTER_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(text+"\n"), 0o644); err != nil {
			t.Errorf("write the cluster report to %s: %v", path, err)
		}
	}
}

// testClusterSearchAttributes is item 3's race on the real server: on a
// namespace created here, the operator API's "registered" comes before a
// start may carry the attributes; agentsaga.RegisterSearchAttributes
// returns only once one may. A start right after it must be accepted.
func testClusterSearchAttributes(t *testing.T, temporal *temporalServer, report *clusterReport) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := temporal.client(t, "default")

	fresh := func(prefix string) (client.Client, string) {
		namespace := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
		require.NoError(t, ensureNamespace(ctx, admin, namespace))
		c, err := client.DialContext(ctx, client.Options{HostPort: temporal.address(), Namespace: namespace, Logger: quietLogger{}})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c, namespace
	}
	startWith := func(c client.Client, id string) error {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "nobody-polls",
			TypedSearchAttributes: workflows.SearchAttributes()}, "Anything")
		if err == nil {
			_ = c.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "test over")
		}
		return err
	}

	// The race, as an operator meets it: the operator API's add (what
	// `temporal operator search-attribute create` calls), then at once a
	// start. How long starts keep being refused is what the wait in
	// RegisterSearchAttributes covers.
	raw, rawNamespace := fresh("sa-raw")
	types := map[string]enumspb.IndexedValueType{}
	for key := range workflows.SearchAttributes().GetUntypedValues() {
		types[key.GetName()] = key.GetValueType()
	}
	_, err := raw.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		SearchAttributes: types, Namespace: rawNamespace})
	require.NoError(t, err, "add the search attributes with the operator API")
	added := time.Now()
	refused := 0
	for attempt := 0; ; attempt++ {
		err := startWith(raw, fmt.Sprintf("raw-%d", attempt))
		if err == nil {
			break
		}
		var invalid *serviceerror.InvalidArgument
		require.ErrorAs(t, err, &invalid, "a start refused for another reason")
		refused++
		require.Less(t, time.Since(added), time.Minute, "starts still refused a minute after the add: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	rawWindow := time.Since(added)

	// agentsaga's own registration: the start right after it is accepted.
	c, namespace := fresh("sa")
	err = startWith(c, "too-early")
	var invalid *serviceerror.InvalidArgument
	require.ErrorAs(t, err, &invalid, "before registering, a start with the attributes is refused")
	assert.Contains(t, err.Error(), "search attribute")
	registering := time.Now()
	require.NoError(t, agentsaga.RegisterSearchAttributes(ctx, c, namespace))
	registered := time.Since(registering)
	require.NoError(t, startWith(c, "right-after"), "a start right after RegisterSearchAttributes is accepted")
	require.NoError(t, agentsaga.RegisterSearchAttributes(ctx, c, namespace), "registering twice")

	report.addf("search attributes on a fresh namespace of the real server: after the operator API's add, starts were refused %d times for %s; "+
		"agentsaga.RegisterSearchAttributes returned after %s and the start right after it was accepted",
		refused, rawWindow.Round(time.Millisecond), registered.Round(time.Millisecond))
}

// testClusterTwoWorkers runs six runs on two worker processes at once,
// with one charge held inside the tool; the worker holding it is killed
// (kill -9) and the other, already polling, takes the call over. Every run
// completes, every charge executes once, and both workers did work.
func testClusterTwoWorkers(t *testing.T, bin string, temporal *temporalServer, report *clusterReport) {
	const namespace = "cluster-two-workers"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := temporal.client(t, namespace)
	databaseURL := agentsagatest.NewDatabase(t)
	const held = "two-workers-0"
	heldKey := held + "/step-001-call-1-charge"
	tool := startToolServer(t, heldKey)
	workers := []*process{
		startWorkerProcess(t, bin, "worker-a", temporal.address(), namespace, databaseURL),
		startWorkerProcess(t, bin, "worker-b", temporal.address(), namespace, databaseURL),
	}
	for _, w := range workers {
		waitPolling(ctx, t, c, w)
	}
	var runs []client.WorkflowRun
	for i := range 6 {
		runs = append(runs, startFaultRun(ctx, t, c, fmt.Sprintf("two-workers-%d", i), faultSpec(t, chargeTwice, tool.URL, 3)))
	}
	tool.waitHeld(ctx, t)
	attempt, ok, err := pendingAttempt(ctx, c, held, "step-001-call-1-charge")
	require.NoError(t, err)
	require.True(t, ok, "the held charge is started")
	var victim, survivor *process
	for i, w := range workers {
		if strings.HasPrefix(attempt.identity, fmt.Sprintf("%d@", w.pid())) {
			victim, survivor = w, workers[1-i]
		}
	}
	require.NotNil(t, victim, "the held charge runs on one of the two workers (identity %s)", attempt.identity)
	victim.kill()
	killed := time.Now()
	for _, run := range runs {
		var result workflows.RunResult
		require.NoError(t, run.Get(ctx, &result), "run %s:\n%s", run.GetID(), survivor.log())
		assert.Equal(t, agentsagatype.RunCompleted, result.Status, "%s: %s", run.GetID(), result.Reason)
	}
	tookOver := time.Since(killed)
	counts := tool.counts()
	requests, executions, duplicates := counts.totals()
	assert.Zero(t, duplicates, "each charge executed once")
	assert.Equal(t, 12, executions, "two charges for each of six runs")
	identities := map[string]bool{}
	for _, run := range runs {
		history := c.GetWorkflowHistory(ctx, run.GetID(), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for history.HasNext() {
			event, err := history.Next()
			require.NoError(t, err)
			if attrs := event.GetActivityTaskStartedEventAttributes(); attrs != nil {
				identities[strings.SplitN(attrs.GetIdentity(), "@", 2)[0]] = true
			}
		}
	}
	assert.True(t, identities[strconv.Itoa(victim.pid())] || identities[strconv.Itoa(survivor.pid())], "the workers' calls are in history")
	assert.True(t, identities[strconv.Itoa(survivor.pid())], "the surviving worker ran calls")
	report.addf("two workers: 6 runs completed, %d requests, %d executions, %d duplicates; worker kill -9 with the held charge inside the tool, "+
		"the other worker finished every run %s after the kill; workers seen in history: %d",
		requests, executions, duplicates, tookOver.Round(time.Millisecond), len(identities))
}
