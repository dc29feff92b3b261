package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// StreamConfig shapes the stream scenario (issue 33): replies streamed by
// an OpenAI-compatible server on loopback, followed over `agentsaga serve`'s
// Server-Sent Events by clients on loopback.
type StreamConfig struct {
	// Runs are measured one after another for first-token latency.
	Runs int `json:"runs"`
	// Tokens is the pieces of each reply (4 characters each), PieceDelay
	// the pause between two.
	Tokens     int           `json:"tokens"`
	PieceDelay time.Duration `json:"piece_delay"`
	// Clients follow ClientRuns runs at once, on one serve process.
	Clients    int `json:"clients"`
	ClientRuns int `json:"client_runs"`

	// Executable is this binary (the serve process); the rest is the
	// stack's.
	Executable      string    `json:"-"`
	TemporalAddress string    `json:"-"`
	Namespace       string    `json:"-"`
	DatabaseURL     string    `json:"-"`
	Progress        io.Writer `json:"-"`
}

// DefaultStream is what `agentsaga bench stream` runs.
var DefaultStream = StreamConfig{Runs: 20, Tokens: 1000, PieceDelay: 2 * time.Millisecond, Clients: 1000, ClientRuns: 4}

// StreamFirstTokenP95Ms is issue 46's target for the first token: the
// first text of a turn goes out at once, not after the batch interval.
const StreamFirstTokenP95Ms = 15.0

// StreamResult is what the scenario measured.
type StreamResult struct {
	Config StreamConfig `json:"config"`
	// FirstToken is from the provider writing a reply's first chunk to an
	// SSE client reading its first text_delta, in milliseconds.
	FirstToken Percentiles `json:"first_token_ms"`
	// ColdFirstToken is the same for the run before them, the first of
	// fresh worker and serve processes, kept out of FirstToken: it pays
	// what a process does once (new connections and their first
	// statements among it), which is not what each turn costs.
	ColdFirstToken float64 `json:"cold_first_token_ms"`
	// DeltaEvents is the text_delta events a reply took, on average; all
	// but the last are a statement each (the last rides on the settle).
	DeltaEvents float64 `json:"delta_events_per_reply"`
	Clients     ClientsResult
	History     HistoryResult `json:"history"`
}

// ClientsResult is the many-clients phase.
type ClientsResult struct {
	Clients, Complete int
	// FirstToken is every client's, as above.
	FirstToken Percentiles
	// The serve process: its CPU seconds while the clients read, and its
	// peak resident memory.
	ServeCPUSeconds float64
	ServePeakMiB    float64
	Seconds         float64
}

// HistoryResult is one run's workflow history, its reply streamed to the
// event log and not (the same provider, its text unwatched).
type HistoryResult struct {
	StreamedEvents, StreamedBytes   int
	UnwatchedEvents, UnwatchedBytes int
}

// Stream runs the scenario on the stack's dev server and database, with a
// worker of its own for the runs whose text nobody watches.
func Stream(ctx context.Context, c client.Client, store *ledger.Store, cfg StreamConfig) (StreamResult, error) {
	res := StreamResult{Config: cfg}
	prov, err := startStreamProvider(cfg)
	if err != nil {
		return res, err
	}
	defer prov.Close()
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return res, fmt.Errorf("bench stream: %w", err)
	}
	defer pool.Close()
	token, _, err := apikeys.New(pool).Create(ctx, fmt.Sprintf("bench-stream-%d", time.Now().UnixNano()),
		[]string{apikeys.RunsRead, apikeys.RunsWrite}, "")
	if err != nil {
		return res, fmt.Errorf("bench stream: a key: %w", err)
	}
	serve, err := startServe(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer serve.stop()
	api := &apiClient{base: serve.base, token: token}
	prefix := fmt.Sprintf("stream-%d", time.Now().Unix())

	// First-token latency, one run at a time, after a cold one.
	var firsts []float64
	var deltas int
	for i := -1; i < cfg.Runs; i++ {
		id := fmt.Sprintf("%s-latency-%03d", prefix, i)
		if i < 0 {
			id = prefix + "-latency-cold"
		}
		if err := api.start(ctx, id, prov.spec(id)); err != nil {
			return res, err
		}
		got, err := api.follow(ctx, id, nil)
		if err != nil {
			return res, err
		}
		first := ms(got.firstDelta.Sub(prov.firstChunk(id)))
		if i < 0 {
			res.ColdFirstToken = first
			fmt.Fprintf(cfg.Progress, "stream: the cold run: first token %.1f ms, %d text_delta events\n", first, got.deltas)
			continue
		}
		firsts = append(firsts, first)
		deltas += got.deltas
		fmt.Fprintf(cfg.Progress, "stream: run %d/%d: first token %.1f ms, %d text_delta events\n", i+1, cfg.Runs, first, got.deltas)
	}
	res.FirstToken = percentiles(firsts)
	res.DeltaEvents = float64(deltas) / float64(max(cfg.Runs, 1))

	if res.Clients, err = streamClients(ctx, cfg, prov, api, serve, prefix); err != nil {
		return res, err
	}
	if res.History, err = streamHistory(ctx, c, store, prov, prefix); err != nil {
		return res, err
	}
	return res, nil
}

// streamClients holds cfg.Clients SSE clients on the serve process, spread
// over cfg.ClientRuns runs whose replies wait until every client is in.
func streamClients(ctx context.Context, cfg StreamConfig, prov *streamProvider, api *apiClient, serve *serveProcess, prefix string) (ClientsResult, error) {
	out := ClientsResult{Clients: cfg.Clients}
	prov.hold()
	ids := make([]string, cfg.ClientRuns)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-clients-%d", prefix, i)
		if err := api.start(ctx, ids[i], prov.spec(ids[i])); err != nil {
			return out, err
		}
	}
	var connected sync.WaitGroup
	connected.Add(cfg.Clients)
	results := make([]followed, cfg.Clients)
	errs := make([]error, cfg.Clients)
	var done sync.WaitGroup
	for i := range cfg.Clients {
		done.Add(1)
		go func() {
			defer done.Done()
			results[i], errs[i] = api.follow(ctx, ids[i%len(ids)], connected.Done)
		}()
	}
	connected.Wait()
	fmt.Fprintf(cfg.Progress, "stream: %d clients follow %d runs on one serve process; the replies start now\n", cfg.Clients, len(ids))
	cpu0, _ := processCPU(serve.cmd.Process.Pid)
	start := time.Now()
	prov.release()
	done.Wait()
	out.Seconds = time.Since(start).Seconds()
	cpu1, _ := processCPU(serve.cmd.Process.Pid)
	out.ServeCPUSeconds = cpu1 - cpu0
	out.ServePeakMiB, _ = peakMiB(serve.cmd.Process.Pid)
	var firsts []float64
	for i, r := range results {
		if errs[i] != nil {
			return out, errs[i]
		}
		if r.complete {
			out.Complete++
		}
		firsts = append(firsts, ms(r.firstDelta.Sub(prov.firstChunk(ids[i%len(ids)]))))
	}
	out.FirstToken = percentiles(firsts)
	return out, nil
}

// streamHistory runs one reply streamed and one whose text nobody watches
// (a worker of its own, whose OpenAI model drops OnText), and reads both
// histories.
func streamHistory(ctx context.Context, c client.Client, store *ledger.Store, prov *streamProvider, prefix string) (HistoryResult, error) {
	var h HistoryResult
	const queue = "bench-stream-unwatched"
	w, err := worker.New(ctx, c, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, Models: map[string]activities.ModelFactory{
		agentsagatype.ProviderOpenAI: func(spec agentsagatype.ModelSpec, key string, hc *http.Client) (activities.Model, error) {
			m, err := activities.NewOpenAIModel(spec, key, hc)
			return unwatchedModel{m}, err
		}}}})
	if err != nil {
		return h, err
	}
	if err := w.Start(); err != nil {
		return h, fmt.Errorf("bench stream: the unwatched worker: %w", err)
	}
	defer w.Stop()
	// IDs of one length: the keys in the histories' payloads are as long.
	for _, run := range []struct {
		id, queue      string
		events, nbytes *int
	}{
		{prefix + "-history-s", workflows.TaskQueue, &h.StreamedEvents, &h.StreamedBytes},
		{prefix + "-history-u", queue, &h.UnwatchedEvents, &h.UnwatchedBytes},
	} {
		spec, err := workflows.ParseSpec([]byte(prov.spec(run.id)))
		if err == nil {
			spec, err = spec.Resolve()
		}
		if err != nil {
			return h, fmt.Errorf("bench stream: the spec: %w", err)
		}
		started, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: run.id, TaskQueue: run.queue}, workflows.AgentRun, spec)
		if err != nil {
			return h, fmt.Errorf("bench stream: start %s: %w", run.id, err)
		}
		if err := started.Get(ctx, nil); err != nil {
			return h, fmt.Errorf("bench stream: %s: %w", run.id, err)
		}
		iter := c.GetWorkflowHistory(ctx, run.id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			e, err := iter.Next()
			if err != nil {
				return h, fmt.Errorf("bench stream: history of %s: %w", run.id, err)
			}
			*run.events++
			*run.nbytes += proto.Size(e)
		}
	}
	return h, nil
}

// unwatchedModel is a model whose streamed text nobody watches.
type unwatchedModel struct{ activities.Model }

func (m unwatchedModel) Turn(ctx context.Context, req activities.ModelRequest) (agentsagatype.ModelTurn, error) {
	req.OnText = nil
	return m.Model.Turn(ctx, req)
}

// streamProvider is an OpenAI-compatible server on loopback that streams
// every run the same reply, cfg.Tokens pieces of 4 characters, and notes
// when it wrote each run's first chunk. hold makes replies wait for
// release.
type streamProvider struct {
	loopback
	events [][]byte
	delay  time.Duration

	mu    sync.Mutex
	first map[string]time.Time
	gate  chan struct{}
}

var streamRunID = regexp.MustCompile(`\[run (stream-[a-z0-9-]+)\]`)

func startStreamProvider(cfg StreamConfig) (*streamProvider, error) {
	text := strings.Repeat("tok ", cfg.Tokens)
	answer, _ := json.Marshal(text)
	events, err := agentsagatest.ReplyStream([]byte(`{"id":"c1","object":"chat.completion","model":"gpt-bench",
		"choices":[{"index":0,"message":{"role":"assistant","content":`+string(answer)+`},"finish_reason":"stop"}],
		"usage":{"prompt_tokens":50,"completion_tokens":`+strconv.Itoa(cfg.Tokens)+`,"total_tokens":`+strconv.Itoa(cfg.Tokens+50)+`}}`), 4)
	if err != nil {
		return nil, fmt.Errorf("bench stream: the reply: %w", err)
	}
	p := &streamProvider{events: events, delay: cfg.PieceDelay, first: map[string]time.Time{}}
	if err := p.serve("127.0.0.1:0", p); err != nil {
		return nil, fmt.Errorf("bench stream: the provider: %w", err)
	}
	return p, nil
}

func (p *streamProvider) hold() {
	p.mu.Lock()
	p.gate = make(chan struct{})
	p.mu.Unlock()
}

func (p *streamProvider) release() {
	p.mu.Lock()
	close(p.gate)
	p.gate = nil
	p.mu.Unlock()
}

func (p *streamProvider) firstChunk(id string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first[id]
}

// spec is a one-turn run whose goal names it, so the provider knows whose
// reply it writes.
func (p *streamProvider) spec(id string) string {
	return fmt.Sprintf("goal: \"[run %s] answer at length\"\nbudget: {steps: 2}\nmodel: {provider: openai, name: gpt-bench, base_url: %q, max_tokens: 4096}\n", id, p.URL())
}

func (p *streamProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m := streamRunID.FindSubmatch(body)
	var request struct {
		Stream bool `json:"stream"`
	}
	if m == nil || json.Unmarshal(body, &request) != nil || !request.Stream {
		http.Error(w, "bench stream: a streamed request naming its run", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i, e := range p.events {
		if _, err := w.Write(e); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		if i == 0 {
			p.mu.Lock()
			p.first[string(m[1])] = time.Now()
			p.mu.Unlock()
		}
		time.Sleep(p.delay)
	}
}

// serveProcess is `agentsaga serve` as a process of its own, so that its
// CPU and memory are its own.
type serveProcess struct {
	*benchProcess
	base string
}

func startServe(ctx context.Context, cfg StreamConfig) (*serveProcess, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench stream: a port for serve: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	logFile, err := os.CreateTemp("", "agentsaga-stream-serve-*.log")
	if err != nil {
		return nil, fmt.Errorf("bench stream: serve's log: %w", err)
	}
	_ = logFile.Close()
	p, err := startProcess(cfg.Executable, []string{"serve", "--listen", addr},
		[]string{"DATABASE_URL=" + cfg.DatabaseURL, "TEMPORAL_ADDRESS=" + cfg.TemporalAddress, "TEMPORAL_NAMESPACE=" + cfg.Namespace}, logFile.Name())
	if err != nil {
		_ = os.Remove(logFile.Name())
		return nil, fmt.Errorf("bench stream: start serve: %w", err)
	}
	s := &serveProcess{benchProcess: p, base: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.base + "/v1/openapi.json")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		fail := func(err error) (*serveProcess, error) {
			s.stop()
			return nil, err
		}
		select {
		case <-s.done:
			return fail(fmt.Errorf("bench stream: serve exited: %s", tail(s.log)))
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("bench stream: serve did not answer within 30 s: %s", tail(s.log)))
		}
	}
}

// stop stops serve as an operator would (benchProcess.stop) and removes
// its log.
func (s *serveProcess) stop() {
	_ = s.benchProcess.stop()
	_ = os.Remove(s.log)
}

// apiClient starts runs and follows them over serve's HTTP API; the
// default client's transport, whose connections per host are unlimited.
type apiClient struct{ base, token string }

func (a *apiClient) start(ctx context.Context, id, spec string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/v1/runs?id="+id, strings.NewReader(spec))
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench stream: start %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("bench stream: start %s: %s: %s", id, resp.Status, body)
	}
	return nil
}

// followed is what one client read of a run.
type followed struct {
	firstDelta time.Time
	deltas     int
	complete   bool // every seq from 1, through run_finished
}

// follow reads a run's events to its end; connected, when set, is called
// once the stream has begun.
func (a *apiClient) follow(ctx context.Context, id string, connected func()) (followed, error) {
	var f followed
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return f, fmt.Errorf("bench stream: follow %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return f, fmt.Errorf("bench stream: follow %s: %s: %s", id, resp.Status, body)
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64<<10), 4<<20)
	var seq int64
	var kind string
	inOrder := true
	for lines.Scan() {
		line := lines.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			if connected != nil {
				connected()
				connected = nil
			}
		case strings.HasPrefix(line, "id: "):
			n, _ := strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
			inOrder = inOrder && n == seq+1
			seq = n
		case strings.HasPrefix(line, "event: "):
			kind = strings.TrimPrefix(line, "event: ")
		case line == "":
			if kind == "text_delta" {
				if f.deltas == 0 {
					f.firstDelta = time.Now()
				}
				f.deltas++
			}
			if kind == "run_finished" {
				f.complete = inOrder
				return f, nil
			}
			kind = ""
		}
	}
	if connected != nil {
		connected()
	}
	if err := lines.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return f, fmt.Errorf("bench stream: follow %s: %w", id, err)
	}
	return f, fmt.Errorf("bench stream: follow %s: the stream ended before run_finished", id)
}

// PrintStream writes the scenario's figures.
func PrintStream(out io.Writer, res StreamResult) {
	cfg := res.Config
	fmt.Fprintf(out, "\nstream: replies of %d pieces, one every %v, from an OpenAI-compatible server on loopback, followed over agentsaga serve's SSE\n",
		cfg.Tokens, cfg.PieceDelay)
	tw := newTable(out, "  FIGURE\tVALUE\tTARGET")
	f := res.FirstToken
	fmt.Fprintf(tw, "  first token, provider's first chunk to the SSE client (%d runs, one at a time)\tp50 %.1f ms, p95 %.1f ms, max %.1f ms\tp95 < %.0f ms (%s)\n",
		f.N, f.P50, f.P95, f.Max, StreamFirstTokenP95Ms, met(f.P95 < StreamFirstTokenP95Ms))
	fmt.Fprintf(tw, "  first token of the run before them, the first of fresh worker and serve processes\t%.1f ms\t-\n", res.ColdFirstToken)
	fmt.Fprintf(tw, "  text_delta events a reply (each a statement; the last rides on the settle)\t%.1f\t-\n", res.DeltaEvents)
	fmt.Fprintf(tw, "  Postgres statements a streamed reply (claim, settle, all text batches but the last)\t%.1f\t-\n", 2+res.DeltaEvents-1)
	c := res.Clients
	fmt.Fprintf(tw, "  %d SSE clients on one serve process, %d runs: complete, in order\t%d of %d\t-\n", c.Clients, cfg.ClientRuns, c.Complete, c.Clients)
	fmt.Fprintf(tw, "  their first token\tp50 %.1f ms, p95 %.1f ms\t-\n", c.FirstToken.P50, c.FirstToken.P95)
	fmt.Fprintf(tw, "  serve's peak memory; its CPU while they read (%.1f s)\t%.0f MiB; %.2f CPU s\t< 512 MiB (%s)\n", c.Seconds, c.ServePeakMiB, c.ServeCPUSeconds, met(c.ServePeakMiB < 512))
	h := res.History
	fmt.Fprintf(tw, "  workflow history of a %d-piece reply: streamed; nobody watching\t%d events, %d bytes; %d events, %d bytes\tthe same (%s)\n",
		cfg.Tokens, h.StreamedEvents, h.StreamedBytes, h.UnwatchedEvents, h.UnwatchedBytes, met(h.StreamedEvents == h.UnwatchedEvents))
	_ = tw.Flush()
}
