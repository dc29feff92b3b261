package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/internal/testbinary"
	"github.com/agentsaga/agentsaga/workflows"
)

// The helpers here run the real pieces as processes, so a fault test can
// do to them what happens in production: SIGKILL a worker, restart
// Postgres, restart the Temporal server on its database file.

// buildAgentsaga returns the agentsaga binary the process tests run,
// built once for the test binary (testbinary.Agentsaga).
func buildAgentsaga(t *testing.T) string {
	t.Helper()
	return testbinary.Agentsaga(t)
}

// freeTCPPort asks the kernel for a free port on 127.0.0.1 and releases it.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err, "pick a free port")
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// process is a child process whose output goes to a log file, so a hung
// child never blocks on a full pipe and its log can be shown on failure.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's error, readable after done
}

// startProcess starts bin with args and env (added to this process's
// environment, later entries winning) and kills it when t ends if it is
// still running.
func startProcess(t *testing.T, name, logPath string, env []string, bin string, args ...string) *process {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err, "open %s's log", name)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A child outlives nothing: if the test binary dies, so does it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	logFile.Close() // the child holds its own descriptor
	require.NoError(t, err, "start %s", name)
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited by now.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to limit for the process to exit.
func (p *process) wait(limit time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(limit):
		return false
	}
}

// kill sends SIGKILL, as the OOM killer or a lost node would, and waits
// for the process to be gone.
func (p *process) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to limit, then kills.
func (p *process) stop(limit time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s: %w", p.name, err)
	}
	if !p.wait(limit) {
		p.kill()
		return fmt.Errorf("%s did not exit within %s of SIGTERM; killed it", p.name, limit)
	}
	return nil
}

// log returns what the process wrote, for failure messages.
func (p *process) log() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	const keep = 4000
	if len(data) > keep {
		data = data[len(data)-keep:]
	}
	return string(data)
}

// temporalServer is a Temporal dev server process with a file database, so
// it can be stopped and started again on the same state.
type temporalServer struct {
	t          *testing.T
	bin        string
	dir        string
	port       int
	namespaces []string
	proc       *process
	starts     int
	// cluster, when set, makes this a real Temporal server on Postgres
	// (`make test-cluster`, cluster_test.go) instead of a dev server.
	cluster *clusterSettings
}

// startTemporalServer starts a dev server on a free port with its state in
// dir/temporal.db and the given namespaces (besides "default"). Under
// `make test-cluster` (AGENTSAGA_CLUSTER_SERVER set) it starts the real
// Temporal server instead, on its Postgres databases and fixed port.
func startTemporalServer(t *testing.T, dir string, namespaces ...string) *temporalServer {
	t.Helper()
	s := &temporalServer{t: t, dir: dir, namespaces: namespaces}
	if s.cluster = clusterFromEnv(t); s.cluster != nil {
		s.port = s.cluster.port
	} else {
		options, err := agentsagatest.DevServerOptions()
		require.NoError(t, err)
		s.bin, s.port = options.ExistingPath, freeTCPPort(t)
	}
	require.NoError(t, s.start())
	t.Cleanup(func() { _ = s.stop() })
	return s
}

func (s *temporalServer) address() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start starts the process and waits until every namespace answers.
func (s *temporalServer) start() error {
	if s.cluster != nil {
		return s.startCluster()
	}
	args := []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--headless", "--db-filename", filepath.Join(s.dir, "temporal.db"), "--log-level", "error",
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false"}
	args = append(args, pausedWorkerKeepalive()...)
	for _, ns := range s.namespaces {
		args = append(args, "--namespace", ns)
	}
	s.starts++
	s.proc = startProcess(s.t, fmt.Sprintf("temporal dev server (start %d)", s.starts),
		filepath.Join(s.dir, "temporal.log"), nil, s.bin, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := dialWhenUp(ctx, s.address(), "default", s.proc)
	if err != nil {
		return fmt.Errorf("temporal dev server at %s: %w\n%s", s.address(), err, s.proc.log())
	}
	defer c.Close()
	for _, ns := range s.namespaces {
		for {
			_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("temporal dev server at %s: namespace %s never appeared: %w", s.address(), ns, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// stop sends SIGTERM, as an orchestrator does, and waits for the exit.
func (s *temporalServer) stop() error { return s.proc.stop(30 * time.Second) }

// dialWhenUp dials Temporal at address until it answers, giving up early
// if proc exits.
func dialWhenUp(ctx context.Context, address, namespace string, proc *process) (client.Client, error) {
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := client.DialContext(attempt, client.Options{HostPort: address, Namespace: namespace, Logger: quietLogger{}})
		cancel()
		if err == nil {
			return c, nil
		}
		if proc != nil && proc.exited() {
			return nil, fmt.Errorf("the process exited (%v) before it answered: %w", proc.err, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no answer: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// quietLogger drops the SDK client's logs: a test's client sees a server go
// away on purpose, and the retries it logs then are expected noise.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// temporalClient dials namespace on s and closes the client when t ends.
func (s *temporalServer) client(t *testing.T, namespace string) client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dialWhenUp(ctx, s.address(), namespace, nil)
	require.NoError(t, err, "dial temporal at %s", s.address())
	t.Cleanup(c.Close)
	return c
}

// startWorkerProcess runs `agentsaga worker [flags]` against Temporal at
// address (namespace) and the database at databaseURL.
func startWorkerProcess(t *testing.T, bin, name, address, namespace, databaseURL string, flags ...string) *process {
	t.Helper()
	env := []string{
		"TEMPORAL_ADDRESS=" + address,
		"TEMPORAL_NAMESPACE=" + namespace,
		"DATABASE_URL=" + databaseURL,
		"AGENTSAGA_METRICS_ADDR=", // no metrics port to collide on
	}
	return startProcess(t, name, filepath.Join(t.TempDir(), name+".log"), env, bin, append([]string{"worker"}, flags...)...)
}

// waitPolling waits until the worker process polls both the workflow and
// the activity task queue: the SDK's default identity starts with its pid.
func waitPolling(ctx context.Context, t *testing.T, c client.Client, w *process) {
	t.Helper()
	prefix := fmt.Sprintf("%d@", w.pid())
	polling := func(kind enumspb.TaskQueueType) bool {
		resp, err := c.DescribeTaskQueue(ctx, workflows.TaskQueue, kind)
		if err != nil {
			return false
		}
		for _, p := range resp.GetPollers() {
			if strings.HasPrefix(p.GetIdentity(), prefix) {
				return true
			}
		}
		return false
	}
	for !polling(enumspb.TASK_QUEUE_TYPE_WORKFLOW) || !polling(enumspb.TASK_QUEUE_TYPE_ACTIVITY) {
		if w.exited() {
			t.Fatalf("%s exited (%v) before it polled:\n%s", w.name, w.err, w.log())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never polled task queue %s:\n%s", w.name, workflows.TaskQueue, w.log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// toolServer is an HTTP tool that is idempotent by Idempotency-Key, as a
// payment API is: the first request with a key executes and stores its
// answer, every later one gets the stored answer back. It counts requests
// and executions per key. The first execution of holdKey is held (after it
// has executed, so its outcome is ambiguous to the caller) until release.
type toolServer struct {
	*httptest.Server
	mu         sync.Mutex
	stored     map[string]string
	requests   map[string]int
	executions map[string]int
	executed   []string // keys in the order they executed
	holdKey    string
	holding    bool
	held       chan string // receives holdKey when its request is held
	release    chan struct{}
	once       sync.Once
}

// startToolServer serves a tool server holding the first execution of
// holdKey ("" holds nothing) and stops it when t ends.
func startToolServer(t *testing.T, holdKey string) *toolServer {
	s := &toolServer{stored: map[string]string{}, requests: map[string]int{}, executions: map[string]int{},
		holdKey: holdKey, held: make(chan string, 1), release: make(chan struct{})}
	s.Server = httptest.NewServer(s)
	t.Cleanup(s.Close)
	t.Cleanup(s.releaseHeld) // before Close, which waits for held requests: cleanups run last first
	return s
}

func (s *toolServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, `{"error":"Idempotency-Key is required"}`, http.StatusBadRequest)
		return
	}
	var args map[string]any
	_ = json.NewDecoder(r.Body).Decode(&args)
	s.mu.Lock()
	s.requests[key]++
	answer, replay := s.stored[key]
	hold := false
	if !replay {
		answer = toolAnswer(r.URL.Path, args)
		s.stored[key] = answer
		s.executions[key]++
		s.executed = append(s.executed, key)
		hold = key == s.holdKey && !s.holding
		s.holding = s.holding || hold
	}
	s.mu.Unlock()
	if hold {
		s.held <- key
		select {
		case <-s.release:
		case <-r.Context().Done(): // the caller is gone (killed, or gave up)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	fmt.Fprint(w, answer)
}

// toolAnswer is what executing path with args produces.
func toolAnswer(path string, args map[string]any) string {
	var answer any
	switch path {
	case "/charge":
		answer = map[string]any{"id": fmt.Sprintf("ch_%v_%v", args["customer"], args["amount"])}
	case "/refund":
		answer = map[string]any{"refunded": args["charge_id"]}
	default:
		answer = map[string]any{"ok": true, "args": args}
	}
	data, _ := json.Marshal(answer)
	return string(data)
}

func (s *toolServer) releaseHeld() { s.once.Do(func() { close(s.release) }) }

// waitHeld waits until the held request has arrived and executed.
func (s *toolServer) waitHeld(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-s.held:
	case <-ctx.Done():
		t.Fatalf("the request with key %s never reached the tool server", s.holdKey)
	}
}

// toolCounts is a copy of what a toolServer counted.
type toolCounts struct {
	requests, executions map[string]int
	executed             []string
}

func (s *toolServer) counts() toolCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := toolCounts{requests: map[string]int{}, executions: map[string]int{}, executed: append([]string(nil), s.executed...)}
	for k, v := range s.requests {
		c.requests[k] = v
	}
	for k, v := range s.executions {
		c.executions[k] = v
	}
	return c
}

// totals returns requests, executions, and duplicates (executions beyond
// the first of a key: what exactly-once forbids).
func (c toolCounts) totals() (requests, executions, duplicates int) {
	for _, n := range c.requests {
		requests += n
	}
	for _, n := range c.executions {
		executions += n
		duplicates += n - 1
	}
	return requests, executions, duplicates
}

// privatePostgres is a Postgres server of the test's own, in a temporary
// directory, so the test can stop and start it without disturbing the
// shared server other packages' tests use.
type privatePostgres struct {
	t       *testing.T
	binDir  string
	dir     string
	port    int
	asOwner []string // the command prefix that runs as the data directory's owner
	starts  int
}

const postgresBinDir = "/usr/lib/postgresql/15/bin"

// startPrivatePostgres initdbs a cluster into a temporary directory and
// starts it on a free port of 127.0.0.1, with its unix socket in that
// directory. It skips the test when the Postgres 15 binaries are missing.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(postgresBinDir, name)); err != nil {
			t.Skipf("a private Postgres needs %s/%s (apt-get install postgresql-15): %v", postgresBinDir, name, err)
		}
	}
	pg := &privatePostgres{t: t, binDir: postgresBinDir, dir: t.TempDir(), port: freeTCPPort(t)}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root: the cluster belongs to postgres,
		// who must be able to reach the directory t.TempDir made (its
		// parent is 0700).
		owner, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root, the private Postgres runs as user postgres")
		uid, _ := strconv.Atoi(owner.Uid)
		gid, _ := strconv.Atoi(owner.Gid)
		require.NoError(t, os.Chmod(filepath.Dir(pg.dir), 0o711), "let postgres traverse the test's temp dir")
		require.NoError(t, os.Chown(pg.dir, uid, gid), "give the cluster's directory to postgres")
		runuser, err := exec.LookPath("runuser")
		require.NoError(t, err, "running as root needs runuser to run Postgres as postgres")
		pg.asOwner = []string{runuser, "-u", "postgres", "--"}
	}
	out, err := pg.run("initdb", "-D", pg.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	require.NoError(t, err, "initdb: %s", out)
	require.NoError(t, pg.start())
	t.Cleanup(func() {
		if out, err := pg.run("pg_ctl", "-D", pg.dataDir(), "-m", "immediate", "-w", "stop"); err != nil && pg.running() {
			t.Errorf("stop the private postgres: %v: %s", err, out)
		}
	})
	return pg
}

func (pg *privatePostgres) dataDir() string { return filepath.Join(pg.dir, "data") }

// run runs a Postgres binary as the cluster's owner, from the cluster's
// directory (the test's working directory may be unreadable to postgres).
func (pg *privatePostgres) run(name string, args ...string) ([]byte, error) {
	argv := append(append(append([]string(nil), pg.asOwner...), filepath.Join(pg.binDir, name)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = pg.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// start starts the server and waits until it accepts connections.
func (pg *privatePostgres) start() error {
	pg.starts++
	options := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
		pg.port, pg.dir)
	out, err := pg.run("pg_ctl", "-D", pg.dataDir(), "-l", filepath.Join(pg.dir, "postgres.log"), "-o", options, "-w", "-t", "60", "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(pg.dir, "postgres.log"))
		return fmt.Errorf("start the private postgres on port %d: %w: %s\n%s", pg.port, err, out, log)
	}
	return nil
}

// stop shuts the server down the way a restart does: fast mode ends every
// session at once.
func (pg *privatePostgres) stop() error {
	if out, err := pg.run("pg_ctl", "-D", pg.dataDir(), "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("stop the private postgres: %w: %s", err, out)
	}
	return nil
}

func (pg *privatePostgres) running() bool {
	_, err := pg.run("pg_ctl", "-D", pg.dataDir(), "status")
	return err == nil
}

// url is the URL of database on this server.
func (pg *privatePostgres) url(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.port, database)
}
