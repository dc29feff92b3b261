package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// The soak (issue 46, item 8; `make soak`, scripts/soak.sh) is the chaos
// harness stretched over hours instead of one fault per run: one ledger,
// one `agentsaga serve` and three worker processes live for the whole
// soak, on the real Temporal server `make test-cluster` builds, while a
// steady mix of runs goes through them: runs under a spend cap that binds,
// runs that wait for an approval the soak answers over the HTTP API, runs
// started and followed over the API's event stream (SSE) to the end, and
// runs with a sub-agent. Every few minutes a worker is killed (kill -9)
// while a charge is inside the payments service, and started again; once,
// half-way, the ledger's Postgres restarts. Each run is checked, once it
// has ended, by the chaos harness's own checks (chaosRun.check and
// checkSpend: I1-I8; I9 is about forks, which the soak does not make, so
// it stays 0), and the soak counts the violations. It also samples the
// memory (VmRSS) of serve and of the workers every 30 s: a process that
// leaks shows it only over hours.
//
// The ledger is a Postgres server of the soak's own (startPrivatePostgres),
// as for the harness's Postgres restarts: the shared 127.0.0.1:5432 holds
// other work's databases and the Temporal server's, and restarting it
// would be a fault injected into them.

var (
	soakDurationFlag  = flag.Duration("soak.duration", 0, "how long TestSoak starts runs (SOAK_DURATION when unset; 0 skips it)")
	soakKillEveryFlag = flag.Duration("soak.kill-every", 0, "how often TestSoak kills a worker (default 3m; SOAK_KILL_EVERY when unset)")
	soakOutFlag       = flag.String("soak.out", "", "where TestSoak writes its figures as JSON (default bench/results/soak.json; SOAK_OUT when unset)")
)

const (
	soakNamespace = "soak"
	// soakWorkers worker processes; the first is never killed, so the
	// soak has one worker whose memory it can follow from start to end.
	soakWorkers     = 3
	soakSampleEvery = 30 * time.Second
	// soakToolTimeout is every tool's timeout_seconds: a killed call's
	// heartbeat timeout, so I5's bound is 3 s + 5 s.
	soakToolTimeout = 3
	// soakMemoryLimit: the last window's mean RSS over the first's.
	soakMemoryLimit = 1.1
)

// The kinds of run the soak mixes; each has a loop of its own, so the mix
// stays even.
const (
	soakCap      = "cap"      // a spend cap that binds on the fourth turn
	soakApproval = "approval" // cat's charge waits for a human: approved or denied over the API
	soakStream   = "stream"   // started over the API and followed over SSE to run_finished
	soakSubAgent = "subagent" // ann is charged by a sub-agent
)

var soakKinds = []string{soakCap, soakApproval, soakStream, soakSubAgent}

type soakConfig struct {
	duration, killEvery time.Duration
	out                 string
}

func soakConfigFrom(t *testing.T) soakConfig {
	cfg := soakConfig{duration: *soakDurationFlag, killEvery: *soakKillEveryFlag, out: *soakOutFlag}
	env := func(into *time.Duration, name string) {
		if *into != 0 {
			return
		}
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				t.Fatalf("%s is %q: want a duration such as 10m", name, v)
			}
			*into = d
		}
	}
	env(&cfg.duration, "SOAK_DURATION")
	env(&cfg.killEvery, "SOAK_KILL_EVERY")
	if cfg.killEvery == 0 {
		cfg.killEvery = 3 * time.Minute
	}
	if cfg.out == "" {
		cfg.out = cmpOr(os.Getenv("SOAK_OUT"), filepath.Join("bench", "results", "soak.json"))
	}
	return cfg
}

// soak is the state the soak's loops share.
type soak struct {
	t        *testing.T
	cfg      soakConfig
	bin      string
	temporal *temporalServer
	c        client.Client
	pg       *privatePostgres
	url      string
	tool     *chaosTool
	api      string // serve's base URL
	apiKey   string
	began    time.Time
	// pgDown is held for writing while Postgres restarts: a run's checks
	// read the ledger, and a check that cannot connect is not a finding.
	pgDown sync.RWMutex

	mu       sync.Mutex
	workers  [soakWorkers]*process
	serve    *process
	inFlight map[string]*chaosRun
	outcomes []soakOutcome
	samples  map[string][]rssSample // by process (a restarted worker is a new one)
	kills    []soakKill
	restarts []time.Time
	seq      int
	// approvals counts the approval runs, to approve and deny in turn.
	approvals int
	ofKind    map[string]int
}

type soakOutcome struct {
	Kind string
	chaosOutcome
	// Stream is what was wrong with a streamed run's events ("" when
	// nothing): read to the end, in order, ending with run_finished.
	Stream string
	// Decision is how an approval run's call was decided.
	Decision string
}

type soakKill struct {
	At       time.Time
	Worker   string
	Run      string // the run whose charge was inside the service; "" when none was
	Takeover time.Duration
}

type rssSample struct {
	At time.Time
	KB float64
}

// TestSoak runs the soak for -soak.duration (SOAK_DURATION); without it
// the test skips, so `make test` never runs it. `make soak` runs it on the
// real server.
func TestSoak(t *testing.T) {
	cfg := soakConfigFrom(t)
	if cfg.duration == 0 {
		t.Skip("the soak runs for hours: `make soak` (SOAK_DURATION, -soak.duration)")
	}
	if clusterFromEnv(t) == nil {
		t.Log("AGENTSAGA_CLUSTER_SERVER is unset: soaking on a dev server, not the real server (`make soak` sets it)")
	}
	s := &soak{t: t, cfg: cfg, inFlight: map[string]*chaosRun{}, samples: map[string][]rssSample{}, ofKind: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.setUp(ctx)

	var loops sync.WaitGroup
	stop := make(chan struct{})
	loops.Add(2)
	go func() { defer loops.Done(); s.sample(stop) }()
	go func() { defer loops.Done(); s.faults(ctx, stop) }()
	var runs sync.WaitGroup
	for _, kind := range soakKinds {
		runs.Add(1)
		go func() {
			defer runs.Done()
			for time.Since(s.began) < cfg.duration {
				s.runOne(ctx, kind)
			}
		}()
	}
	runs.Wait()
	close(stop)
	loops.Wait()
	s.sampleOnce() // the last window ends with the runs
	s.finish()
}

// setUp starts the soak's Postgres and ledger, the payments service, the
// workers, an API key and serve.
func (s *soak) setUp(ctx context.Context) {
	t := s.t
	dir := t.TempDir()
	s.bin = buildAgentsaga(t)
	s.temporal = startTemporalServer(t, dir, soakNamespace)
	s.c = s.temporal.client(t, soakNamespace)
	s.pg = startPrivatePostgres(t)
	s.url = s.pg.url("agentsaga_soak")
	if err := ledger.EnsureDatabase(ctx, s.url); err != nil {
		t.Fatal(err)
	}
	s.tool = startChaosTool(t)
	// A real server's fresh namespace has none of agentsaga's search
	// attributes, and a start over the API sets them.
	if err := agentsaga.RegisterSearchAttributes(ctx, s.c, soakNamespace); err != nil {
		t.Fatal(err)
	}
	for slot := range s.workers {
		s.startWorker(ctx, slot)
	}
	create := exec.Command(s.bin, "keys", "create", "--name", "soak", "--scopes", "runs:read,runs:write,approvals:decide")
	create.Env = append(os.Environ(), "DATABASE_URL="+s.url)
	key, err := create.Output()
	if err != nil {
		t.Fatalf("agentsaga keys create: %v", err)
	}
	s.apiKey = strings.TrimSpace(string(key))
	listen := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	s.api = "http://" + listen
	s.serve = startProcess(t, "serve", filepath.Join(dir, "serve.log"), s.env(), s.bin, "serve", "--listen", listen)
	if err := pollUntil(ctx, "serve to answer", 100*time.Millisecond, func() bool {
		resp, err := http.Get(s.api + "/v1/openapi.json")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}); err != nil {
		t.Fatalf("%v\n%s", err, s.serve.log())
	}
	s.began = time.Now()
	s.sampleOnce()
	t.Logf("soak: %s of runs on %s, %d workers and serve at %s, a worker killed every %s, Postgres restarted at %s",
		s.cfg.duration, s.temporal.address(), soakWorkers, s.api, s.cfg.killEvery, s.cfg.duration/2)
}

func (s *soak) env() []string {
	return []string{"TEMPORAL_ADDRESS=" + s.temporal.address(), "TEMPORAL_NAMESPACE=" + soakNamespace,
		"DATABASE_URL=" + s.url, "AGENTSAGA_METRICS_ADDR="}
}

// startWorker starts the worker of slot (again, after a kill) and waits
// until it polls.
func (s *soak) startWorker(ctx context.Context, slot int) *process {
	s.mu.Lock()
	s.seq++
	name := fmt.Sprintf("worker-%d.%d", slot, s.seq)
	s.mu.Unlock()
	w := startWorkerProcess(s.t, s.bin, name, s.temporal.address(), soakNamespace, s.url)
	waitPolling(ctx, s.t, s.c, w)
	s.mu.Lock()
	s.workers[slot] = w
	s.mu.Unlock()
	return w
}

// runOne runs one run of kind, from its cap to its checks, as a subtest
// (its checks may stop it), and records what it found.
func (s *soak) runOne(ctx context.Context, kind string) {
	s.mu.Lock()
	s.seq++
	n := s.seq
	s.mu.Unlock()
	wf := fmt.Sprintf("soak-%s-%d", kind, n)
	out := soakOutcome{Kind: kind, chaosOutcome: chaosOutcome{Takeover: -1, Err: "the run stopped before its checks (see its log)"}}
	s.t.Run(wf, func(t *testing.T) {
		out = s.run(ctx, t, kind, n, wf)
	})
	s.mu.Lock()
	s.outcomes = append(s.outcomes, out)
	s.mu.Unlock()
}

func (s *soak) run(ctx context.Context, t *testing.T, kind string, n int, wf string) soakOutcome {
	cc := chaosCase{Label: "soak-" + kind, Timeout: soakToolTimeout, Ending: endingCommit, Run: n}
	switch {
	case kind == soakCap:
		cc.Label = "" // so capMode binds: the fourth turn is refused
	case kind != soakSubAgent && s.nextOfKind(kind)%2 == 1:
		cc.Ending = endingAbort // the 403 escalates, the run is aborted and compensates
	}
	account := fmt.Sprintf("soak-%d", n)
	r := &chaosRun{t: t, env: chaosEnv{bin: s.bin, temporal: s.temporal, namespace: soakNamespace}, cc: cc, began: time.Now(),
		c: s.c, wf: wf, ledger: chaosLedger{url: s.url, account: account}, tool: s.tool}
	r.faultActivity = "step-002-call-1-charge" // bob's, as the docs spell an activity ID: what a kill aims at
	r.faultKey = wf + "/" + r.faultActivity
	yaml := soakSpecYAML(kind, chaosSpecYAML(cc, s.tool.URL), account)
	spec, err := workflows.ParseSpec([]byte(yaml))
	r.must(err)
	r.spec = spec
	ctx, cancel := context.WithTimeout(ctx, r.limit())
	defer cancel()
	r.must(s.withLedger(func() error { r.setSpendCap(ctx); return nil }))

	s.mu.Lock()
	s.inFlight[wf] = r
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.inFlight, wf)
		s.mu.Unlock()
	}()

	out := soakOutcome{Kind: kind}
	var stream chan string
	if kind == soakStream {
		r.must(s.startOverAPI(ctx, wf, yaml))
		stream = make(chan string, 1)
		go func() { stream <- s.follow(ctx, wf) }()
	} else {
		startFaultRun(ctx, t, s.c, wf, spec)
	}
	ended := make(chan struct{})
	var background sync.WaitGroup
	defer background.Wait()
	defer cancel()
	background.Add(1)
	go func() {
		defer background.Done()
		r.abortWhenWaiting(ctx, ended)
	}()
	if kind == soakApproval {
		background.Add(1)
		go func() {
			defer background.Done()
			out.Decision = s.decide(ctx, wf, s.nextApproval(), ended)
		}()
	}
	result, err := chaosResult(ctx, s.c.GetWorkflow(ctx, wf, ""))
	endAt := time.Now()
	close(ended)
	// Out of the kill loop's reach before its checks read the fault's
	// fields, which the kill loop writes under s.mu.
	s.mu.Lock()
	delete(s.inFlight, wf)
	s.mu.Unlock()
	if err != nil {
		t.Errorf("%s: %v", wf, err)
		out.chaosOutcome = chaosOutcome{Case: cc, Takeover: -1, Err: err.Error()}
		return out
	}
	if stream != nil {
		out.Stream = <-stream
	}
	// As in the harness: nothing can arrive after the run's end plus a
	// tool's timeout.
	r.must(sleepCtx(ctx, time.Until(endAt.Add(cc.timeout()+2*time.Second))))
	_ = s.withLedger(func() error {
		out.chaosOutcome = r.check(ctx, result)
		r.checkSpend(ctx, result, &out.chaosOutcome)
		return nil
	})
	out.Case = r.cc
	for _, e := range out.Evidence {
		t.Errorf("%s: %s", wf, e)
	}
	if out.Err != "" {
		t.Errorf("%s: could not check the run: %s", wf, out.Err)
	}
	if out.CapMissed != "" {
		t.Errorf("%s: %s", wf, out.CapMissed)
	}
	if out.Stream != "" {
		t.Errorf("%s: the event stream: %s", wf, out.Stream)
	}
	takeover := "-"
	if out.Takeover >= 0 {
		takeover = out.Takeover.Round(time.Millisecond).String()
	}
	t.Logf("%s: %s in %s, violations I1..I9=%v, cap refusals %d, takeover %s, decision %q", wf, out.Status,
		time.Since(r.began).Round(time.Second), out.Violations, out.Capped, takeover, out.Decision)
	return out
}

// nextOfKind counts the runs of kind, 1 for the first: every other
// approval or stream run ends with the 403 (the global seq would not
// alternate within a kind).
func (s *soak) nextOfKind(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ofKind[kind]++
	return s.ofKind[kind]
}

// nextApproval says whether the next approval run's call is approved:
// every other one is denied.
func (s *soak) nextApproval() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.approvals++
	return s.approvals%2 == 1
}

// withLedger runs fn while Postgres is up.
func (s *soak) withLedger(fn func() error) error {
	s.pgDown.RLock()
	defer s.pgDown.RUnlock()
	return fn()
}

// soakSpecYAML varies the chaos harness's spec for kind: the run's own
// account; an approval on cat's charge; ann charged by a sub-agent.
func soakSpecYAML(kind, yaml, account string) string {
	yaml = strings.Replace(yaml, "account: "+chaosAccount, "account: "+account+"/payments", 1)
	switch kind {
	case soakApproval:
		yaml = strings.Replace(yaml, "  - name: charge\n    kind: http\n",
			"  - name: charge\n    kind: http\n    approval: {when: \"customer == 'cat'\"}\n", 1)
	case soakSubAgent:
		yaml = strings.Replace(yaml, "    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]\n",
			"    - tool_calls: [{name: biller, arguments: {task: charge ann 10}}]\n", 1)
		yaml += fmt.Sprintf(`  - {name: biller, kind: agent, parameters: {type: object, properties: {task: {type: string}}, required: [task]}}
agents:
  biller:
    tools: [charge]
    share: 0.4
    model:
      provider: scripted
      name: %s
      max_tokens: %d
      script:
        - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]
        - content: charged ann
`, chaosModel, chaosMaxTokens)
	}
	return yaml
}

// request sends an authenticated request to serve.
func (s *soak) request(ctx context.Context, method, path, contentType string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.api+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+s.apiKey)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return http.DefaultClient.Do(req)
}

// startOverAPI starts the run with POST /v1/runs, as an application would.
func (s *soak) startOverAPI(ctx context.Context, wf, yaml string) error {
	resp, err := s.request(ctx, http.MethodPost, "/v1/runs?id="+url.QueryEscape(wf), "application/yaml", strings.NewReader(yaml), nil)
	if err != nil {
		return fmt.Errorf("POST /v1/runs: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST /v1/runs: %s: %s", resp.Status, body)
	}
	return nil
}

// follow reads the run's event stream to its end as an EventSource does:
// reconnecting with Last-Event-ID when the stream breaks (serve, or its
// Postgres, going away), until run_finished or a 204. It returns what was
// wrong: a gap or a repeat in the seqs, or no run_finished.
func (s *soak) follow(ctx context.Context, wf string) string {
	last, finished := 0, false
	for reconnects := 0; !finished; reconnects++ {
		if reconnects > 20 {
			return fmt.Sprintf("no run_finished after %d reconnections (last seq %d)", reconnects, last)
		}
		if reconnects > 0 {
			if sleepCtx(ctx, time.Second) != nil {
				return "the run's time ran out while following it"
			}
		}
		header := http.Header{}
		if last > 0 {
			header.Set("Last-Event-ID", strconv.Itoa(last))
		}
		resp, err := s.request(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(wf)+"/events", "", nil, header)
		if err != nil {
			continue
		}
		if resp.StatusCode == http.StatusNoContent {
			resp.Body.Close()
			return fmt.Sprintf("204 (the run ended) before run_finished was read (last seq %d)", last)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			continue
		}
		scanner := bufio.NewScanner(resp.Body)
		scanner.Buffer(make([]byte, 64*1024), 4*1024*1024)
		var id int
		var kind string
		for scanner.Scan() {
			line := scanner.Text()
			switch {
			case strings.HasPrefix(line, "id:"):
				id, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "id:")))
			case strings.HasPrefix(line, "event:"):
				kind = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case line == "" && id > 0:
				if id != last+1 {
					resp.Body.Close()
					return fmt.Sprintf("event %d (%s) after %d", id, kind, last)
				}
				last = id
				finished = finished || kind == "run_finished"
				id, kind = 0, ""
			}
		}
		resp.Body.Close()
	}
	return ""
}

// decide approves (or denies) the run's call waiting for approval over
// the API, as soon as GET /v1/approvals lists it.
func (s *soak) decide(ctx context.Context, wf string, approve bool, ended <-chan struct{}) string {
	verb, done, body := "approve", "approved", `{"reason": "soak: approved"}`
	if !approve {
		verb, done, body = "deny", "denied", `{"reason": "soak: denied"}`
	}
	for {
		select {
		case <-ended:
			return "none (the run ended first)"
		case <-ctx.Done():
			return "none (time ran out)"
		case <-time.After(500 * time.Millisecond):
		}
		resp, err := s.request(ctx, http.MethodGet, "/v1/approvals?limit=1000", "", nil, nil)
		if err != nil {
			continue
		}
		var list struct {
			Approvals []agentsagatype.Approval `json:"approvals"`
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, a := range list.Approvals {
			if a.WorkflowID != wf {
				continue
			}
			path := fmt.Sprintf("/v1/runs/%s/approvals/%s/%s", url.PathEscape(wf), url.PathEscape(a.Call), verb)
			resp, err := s.request(ctx, http.MethodPost, path, "application/json", strings.NewReader(body), nil)
			if err != nil {
				continue
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return done
			}
			s.t.Logf("%s: %s %s: %s: %s", wf, verb, a.Call, resp.Status, bytes.TrimSpace(answer))
		}
	}
}

// faults kills a worker every killEvery and restarts Postgres once, at
// the soak's midpoint, until stop.
func (s *soak) faults(ctx context.Context, stop <-chan struct{}) {
	kill := time.NewTicker(s.cfg.killEvery)
	defer kill.Stop()
	restart := time.After(s.cfg.duration / 2)
	for {
		select {
		case <-stop:
			return
		case <-kill.C:
			s.killWorker(ctx, stop)
		case <-restart:
			s.pgDown.Lock()
			err := s.pg.stop()
			at := time.Now()
			if err == nil {
				_ = sleepCtx(ctx, 2*time.Second)
				err = s.pg.start()
			}
			s.pgDown.Unlock()
			if err != nil {
				s.t.Errorf("soak: restart Postgres: %v", err)
				continue
			}
			s.mu.Lock()
			s.restarts = append(s.restarts, at)
			s.mu.Unlock()
			s.t.Logf("soak: restarted Postgres at +%s", at.Sub(s.began).Round(time.Second))
		}
	}
}

// killWorker aims a kill -9 the way the harness's during-effect cases do:
// it holds bob's charge of a run in flight inside the payments service,
// before its effect, and kills the worker whose attempt sent it; that run
// then counts I5 (a later attempt must reach the service within the
// heartbeat timeout plus 5 s). Runs are picked until one's charge arrives
// on a worker that may be killed (not the first), at most a minute; then
// the kill strikes a worker at random and no run counts I5 for it.
func (s *soak) killWorker(ctx context.Context, stop <-chan struct{}) {
	giveUp := time.Now().Add(time.Minute)
	tried := map[string]bool{}
	for time.Now().Before(giveUp) {
		if chanClosed(stop) {
			return // the runs are over: nothing to kill a worker under
		}
		r := s.pickRun(tried)
		if r == nil {
			if sleepCtx(ctx, time.Second) != nil {
				return
			}
			continue
		}
		h := s.tool.hold(r.faultKey, holdBeforeEffect, 0)
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := h.waitArrived(waitCtx)
		cancel()
		if err != nil {
			h.Release()
			s.t.Logf("soak: kill: %s's charge never came: %v", r.wf, err)
			continue
		}
		attempt, ok, err := pendingAttempt(ctx, s.c, r.wf, r.faultActivity)
		slot := s.slotOf(attempt.identity)
		if err != nil || !ok || slot < 1 || attempt.number != h.attempt {
			h.Release() // on the worker kept alive, or not found: let it go
			s.t.Logf("soak: kill: %s's charge (attempt %d) is not on a worker to kill (slot %d, attempt %d %q, %v)",
				r.wf, h.attempt, slot, attempt.number, attempt.identity, err)
			continue
		}
		s.mu.Lock()
		if s.inFlight[r.wf] != r { // ended meanwhile: its checks may have begun
			s.mu.Unlock()
			h.Release()
			continue
		}
		w := s.workers[slot]
		w.kill()
		r.cc.Fault, r.faultAttempt, r.faultAt = faultKill, h.attempt, time.Now()
		r.note("killed %s (attempt %d of %s)", w.name, r.faultAttempt, r.faultActivity)
		s.kills = append(s.kills, soakKill{At: r.faultAt, Worker: w.name, Run: r.wf})
		s.mu.Unlock()
		s.t.Logf("soak: killed %s at +%s with %s's charge inside the service", w.name, time.Since(s.began).Round(time.Second), r.wf)
		s.startWorker(ctx, slot)
		return
	}
	if chanClosed(stop) {
		return
	}
	slot := 1 + rand.IntN(soakWorkers-1)
	s.mu.Lock()
	w := s.workers[slot]
	w.kill()
	s.kills = append(s.kills, soakKill{At: time.Now(), Worker: w.name})
	s.mu.Unlock()
	s.t.Logf("soak: killed %s at +%s (no charge caught inside the service)", w.name, time.Since(s.began).Round(time.Second))
	s.startWorker(ctx, slot)
}

// pickRun is a run in flight that has not sent bob's charge yet and is
// not struck yet.
func (s *soak) pickRun(tried map[string]bool) *chaosRun {
	sent := map[string]bool{}
	for _, req := range s.tool.state().requests {
		sent[req.Key] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, wf := range sortedKeys(s.inFlight) {
		r := s.inFlight[wf]
		if !tried[wf] && r.cc.Fault == "" && !sent[r.faultKey] {
			tried[wf] = true
			return r
		}
	}
	return nil
}

// slotOf is the slot of the worker whose SDK identity this is; -1 when
// none.
func (s *soak) slotOf(identity string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for slot, w := range s.workers {
		if w != nil && strings.HasPrefix(identity, fmt.Sprintf("%d@", w.pid())) {
			return slot
		}
	}
	return -1
}

// sample records the RSS of serve and each live worker every
// soakSampleEvery until stop.
func (s *soak) sample(stop <-chan struct{}) {
	tick := time.NewTicker(soakSampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			s.sampleOnce()
		}
	}
}

func (s *soak) sampleOnce() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, p := range append([]*process{s.serve}, s.workers[:]...) {
		if p == nil || p.exited() {
			continue
		}
		if kb, err := bench.ProcStatusKB(p.pid(), "VmRSS"); err == nil {
			s.samples[p.name] = append(s.samples[p.name], rssSample{At: now, KB: kb})
		}
	}
}

// soakMemory is one process's first and last window.
type soakMemory struct {
	Process  string  `json:"process"`
	Window   string  `json:"window"`
	Samples  int     `json:"samples"`
	FirstMB  float64 `json:"first_window_mb"`
	LastMB   float64 `json:"last_window_mb"`
	Ratio    float64 `json:"ratio"`
	Enforced bool    `json:"enforced"`
}

// memory compares each process's first window of the soak with its last:
// half an hour each in a soak of two hours or more, a quarter of the soak
// otherwise. Like is compared with like: serve and the first worker live
// for the whole soak and must stay under soakMemoryLimit; a restarted
// worker's series is its own, compared over quarters of its own life,
// and reported only (a fresh process's first minutes are its warm-up).
func (s *soak) memory() []soakMemory {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []soakMemory
	for _, name := range sortedKeys(s.samples) {
		series := s.samples[name]
		if len(series) < 4 {
			continue
		}
		start, end := series[0].At, series[len(series)-1].At
		whole := name == s.serve.name || strings.HasPrefix(name, "worker-0.")
		window := end.Sub(start) / 4
		if whole && s.cfg.duration >= 2*time.Hour {
			window = 30 * time.Minute
		}
		mean := func(from, to time.Time) float64 {
			sum, n := 0.0, 0
			for _, x := range series {
				if !x.At.Before(from) && !x.At.After(to) {
					sum, n = sum+x.KB, n+1
				}
			}
			return sum / float64(max(n, 1)) / 1024
		}
		first, last := mean(start, start.Add(window)), mean(end.Add(-window), end)
		rows = append(rows, soakMemory{Process: name, Window: window.Round(time.Second).String(), Samples: len(series),
			FirstMB: round2(first), LastMB: round2(last), Ratio: round2(last / first), Enforced: whole})
	}
	return rows
}

func round2(x float64) float64 { return float64(int(x*100+0.5)) / 100 }

// soakReport is what the soak writes as JSON.
type soakReport struct {
	Duration   string                    `json:"duration"`
	Took       string                    `json:"took"`
	KillEvery  string                    `json:"kill_every"`
	Server     string                    `json:"server"`
	Runs       map[string]map[string]int `json:"runs"` // kind -> status -> runs
	Violations map[string]int            `json:"violations"`
	Unchecked  int                       `json:"unchecked"`
	Kills      int                       `json:"kills"`
	AimedKills int                       `json:"kills_with_a_charge_inside"`
	Takeovers  []float64                 `json:"takeovers_s"`
	PGRestarts int                       `json:"postgres_restarts"`
	Decisions  map[string]int            `json:"decisions"`
	Capped     int                       `json:"runs_capped"`
	Memory     []soakMemory              `json:"memory"`
	Passed     bool                      `json:"passed"`
}

// finish prints the tables, writes the JSON and fails the soak on any
// violation, any run it could not check, or memory that grew.
func (s *soak) finish() {
	t := s.t
	s.mu.Lock()
	outcomes := append([]soakOutcome(nil), s.outcomes...)
	rep := soakReport{Duration: s.cfg.duration.String(), Took: time.Since(s.began).Round(time.Second).String(),
		KillEvery: s.cfg.killEvery.String(), Server: "dev server", Runs: map[string]map[string]int{},
		Violations: map[string]int{}, Kills: len(s.kills), PGRestarts: len(s.restarts), Decisions: map[string]int{}}
	s.mu.Unlock()
	if c := clusterFromEnv(t); c != nil {
		rep.Server = "temporal-server (" + c.server + ")"
	}
	for i := 1; i <= 9; i++ {
		rep.Violations[fmt.Sprintf("I%d", i)] = 0
	}
	rep.Violations["stream"] = 0
	for _, o := range outcomes {
		if rep.Runs[o.Kind] == nil {
			rep.Runs[o.Kind] = map[string]int{}
		}
		status := cmpOr(o.Status, "unchecked")
		rep.Runs[o.Kind][status]++
		for i, n := range o.Violations {
			rep.Violations[fmt.Sprintf("I%d", i+1)] += n
		}
		if o.Stream != "" {
			rep.Violations["stream"]++
		}
		if o.Err != "" || o.CapMissed != "" {
			rep.Unchecked++
		}
		if o.Takeover >= 0 {
			rep.AimedKills++
			rep.Takeovers = append(rep.Takeovers, round2(o.Takeover.Seconds()))
		}
		if o.Decision != "" {
			rep.Decisions[o.Decision]++
		}
		if o.Capped > 0 {
			rep.Capped++
		}
	}
	sort.Float64s(rep.Takeovers)
	rep.Memory = s.memory()
	rep.Passed = rep.Unchecked == 0 && !t.Failed()
	for _, n := range rep.Violations {
		rep.Passed = rep.Passed && n == 0
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "soak on %s: %s of runs (took %s), %d kills (%d with a charge inside the service), %d Postgres restarts\n",
		rep.Server, rep.Duration, rep.Took, rep.Kills, rep.AimedKills, rep.PGRestarts)
	fmt.Fprintln(w, "kind\truns\tended\t")
	for _, kind := range soakKinds {
		total, ended := 0, []string{}
		for _, status := range sortedKeys(rep.Runs[kind]) {
			total += rep.Runs[kind][status]
			ended = append(ended, fmt.Sprintf("%s %d", status, rep.Runs[kind][status]))
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t\n", kind, total, strings.Join(ended, ", "))
	}
	fmt.Fprintln(w, "\nI1\tI2\tI3\tI4\tI5\tI6\tI7\tI8\tI9\tstream\tunchecked\t")
	v := rep.Violations
	fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", v["I1"], v["I2"], v["I3"], v["I4"], v["I5"], v["I6"], v["I7"],
		v["I8"], v["I9"], v["stream"], rep.Unchecked)
	fmt.Fprintf(w, "\ntakeovers after a kill (s): %v; runs capped: %d; approvals: %v\n", rep.Takeovers, rep.Capped, rep.Decisions)
	fmt.Fprintln(w, "\nprocess\twindow\tsamples\tfirst MB\tlast MB\tlast/first\t")
	for _, m := range rep.Memory {
		mark := ""
		if m.Enforced {
			mark = fmt.Sprintf(" (at most %.1f)", soakMemoryLimit)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%.1f\t%.1f\t%.2f%s\t\n", m.Process, m.Window, m.Samples, m.FirstMB, m.LastMB, m.Ratio, mark)
		if m.Enforced && m.Ratio > soakMemoryLimit {
			rep.Passed = false
			t.Errorf("soak: %s's memory grew from %.1f MB to %.1f MB (%.2fx, over %.1fx)", m.Process, m.FirstMB, m.LastMB, m.Ratio, soakMemoryLimit)
		}
	}
	w.Flush()
	fmt.Print(b.String()) // once: scripts/soak.sh shows it from the log
	data, err := json.MarshalIndent(rep, "", "  ")
	if err == nil {
		err = os.WriteFile(s.cfg.out, append(data, '\n'), 0o644)
	}
	if err != nil {
		t.Errorf("write %s: %v", s.cfg.out, err)
	}
	fmt.Printf("%s\n", data)
	if !rep.Passed {
		t.Errorf("soak: failed (violations %v, %d runs unchecked)", rep.Violations, rep.Unchecked)
	}
}
