package worker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/proxy"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/agentsaga/agentsaga/worker"
)

// testCA is a certificate authority made for one test, and the files of
// what it signed.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate file.
	PEM string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key}
	ca.PEM = ca.write(t, name+"-ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return ca
}

func (ca *testCA) write(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(ca.dir, name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// issue signs a certificate for name (a server's DNS name and 127.0.0.1,
// or a client's common name) and returns its certificate and key files.
func (ca *testCA) issue(t *testing.T, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		template.DNSNames = []string{name}
		template.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile = ca.write(t, name+".pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	keyFile = ca.write(t, name+"-key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	return certFile, keyFile
}

// guardedFrontend is a Temporal frontend as a cluster or Temporal Cloud
// runs it, in front of the test's dev server: it speaks TLS only (with a
// certificate from serverCA, for the name "temporal.test"), requires a
// client certificate from clientCA when one is given, and requires
// `authorization: Bearer <apiKey>` on every call when apiKey is set. It
// forwards the WorkflowService (all a worker and the run commands use)
// and answers the gRPC health check.
type guardedFrontend struct {
	Address string

	mu sync.Mutex
	// clients are the verified client certificates' names, bearers the
	// authorization values seen, one per call.
	clients, bearers []string
}

func startGuardedFrontend(t *testing.T, serverCA, clientCA *testCA, apiKey string) *guardedFrontend {
	t.Helper()
	certFile, keyFile := serverCA.issue(t, "temporal.test", true)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)
	config := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clientCA.cert)
		config.ClientCAs, config.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	f := &guardedFrontend{}
	check := func(ctx context.Context, _ any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok {
			if tlsInfo, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(tlsInfo.State.PeerCertificates) > 0 {
				f.mu.Lock()
				f.clients = append(f.clients, tlsInfo.State.PeerCertificates[0].Subject.CommonName)
				f.mu.Unlock()
			}
		}
		md, _ := metadata.FromIncomingContext(ctx)
		bearer := strings.Join(md.Get("authorization"), ",")
		f.mu.Lock()
		f.bearers = append(f.bearers, bearer)
		f.mu.Unlock()
		if apiKey != "" && bearer != "Bearer "+apiKey {
			return nil, status.Errorf(codes.Unauthenticated, "%s: a valid API key is required", info.FullMethod)
		}
		return handler(ctx, nil)
	}
	server := grpc.NewServer(grpc.Creds(credentials.NewTLS(config)), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			resp, err := check(ctx, req, info, func(ctx context.Context, _ any) (any, error) { return handler(ctx, req) })
			if err != nil {
				// The forwarding client hands back Temporal's typed errors
				// (NotFound, ...); as they came, with their details, not as
				// gRPC's Unknown, which a client retries.
				return nil, serviceerror.ToStatus(err).Err()
			}
			return resp, nil
		}))
	forward, err := proxy.NewWorkflowServiceProxyServer(proxy.WorkflowServiceProxyOptions{Client: temporalClient.WorkflowService()})
	require.NoError(t, err)
	f.Address = serveFrontend(t, server, forward)
	return f
}

// serveFrontend serves frontend's WorkflowService on server, with the
// health check the SDK's Dial asks for, on a loopback port until the test
// ends, and returns its address.
func serveFrontend(t *testing.T, server *grpc.Server, frontend workflowservice.WorkflowServiceServer) string {
	t.Helper()
	workflowservice.RegisterWorkflowServiceServer(server, frontend)
	healthServer := health.NewServer()
	healthServer.SetServingStatus("temporal.api.workflowservice.v1.WorkflowService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(server, healthServer)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	return listener.Addr().String()
}

func (f *guardedFrontend) seen() (clients, bearers []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.clients...), append([]string(nil), f.bearers...)
}

// isolateTemporalEnv clears every variable envconfig reads, so a test
// sees only what it sets (t.Setenv restores them after).
func isolateTemporalEnv(t *testing.T) {
	t.Helper()
	for _, name := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_PROFILE",
		"TEMPORAL_TLS", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_DATA", "TEMPORAL_TLS_CLIENT_KEY_PATH",
		"TEMPORAL_TLS_CLIENT_KEY_DATA", "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
		"TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "TEMPORAL_CLIENT_AUTHORITY",
		"TEMPORAL_CODEC_ENDPOINT", "TEMPORAL_CODEC_AUTH"} {
		t.Setenv(name, "")
		require.NoError(t, os.Unsetenv(name))
	}
	// No user's own ~/.config/temporalio/temporal.toml either.
	t.Setenv("TEMPORAL_CONFIG_FILE", filepath.Join(t.TempDir(), "none.toml"))
}

// mtlsProfile writes a temporal.toml with profile "cluster" pointing at the
// frontend with the given client certificate and key and the server CA.
func mtlsProfile(t *testing.T, address, certFile, keyFile, caFile string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`
[profile.default]
address = "127.0.0.1:1"

[profile.cluster]
address = %q
namespace = "default"

[profile.cluster.tls]
client_cert_path = %q
client_key_path = %q
server_ca_cert_path = %q
server_name = "temporal.test"
`, address, certFile, keyFile, caFile)), 0o600))
	return path
}

// A worker reaches a server that requires mutual TLS with the profile's
// client certificate, key and server CA, chosen by TEMPORAL_PROFILE; the
// server verified the certificate on every call. A certificate from
// another CA, or a server CA that did not sign the server's, fails Dial
// with one line that says which and names the files, and no key.
func TestDialWithMutualTLSFromAProfile(t *testing.T) {
	isolateTemporalEnv(t)
	serverCA, clientCA, otherCA := newTestCA(t, "server"), newTestCA(t, "clients"), newTestCA(t, "stranger")
	frontend := startGuardedFrontend(t, serverCA, clientCA, "")
	certFile, keyFile := clientCA.issue(t, "agentsaga-worker", false)
	t.Setenv("TEMPORAL_CONFIG_FILE", mtlsProfile(t, frontend.Address, certFile, keyFile, serverCA.PEM))
	t.Setenv("TEMPORAL_PROFILE", "cluster")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cfg := worker.ConfigFromEnv()
	assert.Equal(t, frontend.Address, cfg.TemporalAddress, "the profile's address")
	c, err := worker.Dial(ctx, cfg)
	require.NoError(t, err)
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
	c.Close()
	require.NoError(t, err)
	clients, _ := frontend.seen()
	require.NotEmpty(t, clients)
	for _, name := range clients {
		assert.Equal(t, "agentsaga-worker", name, "every call carried the profile's client certificate")
	}

	// A certificate the server does not trust.
	strangerCert, strangerKey := otherCA.issue(t, "stranger", false)
	t.Setenv("TEMPORAL_CONFIG_FILE", mtlsProfile(t, frontend.Address, strangerCert, strangerKey, serverCA.PEM))
	_, err = worker.Dial(ctx, worker.ConfigFromEnv())
	require.Error(t, err)
	assertOneLineWithout(t, err, readFile(t, strangerKey))
	assert.Contains(t, err.Error(), "client cert "+strangerCert)
	// Under TLS 1.3 the server refuses the certificate after the
	// handshake, and gRPC often sees only a broken pipe: Dial asks the
	// server itself, so the error always says what is wrong.
	assert.Contains(t, err.Error(), "tls: certificate required")

	// A server CA that did not sign the server's certificate.
	t.Setenv("TEMPORAL_CONFIG_FILE", mtlsProfile(t, frontend.Address, certFile, keyFile, otherCA.PEM))
	_, err = worker.Dial(ctx, worker.ConfigFromEnv())
	require.Error(t, err)
	assertOneLineWithout(t, err, readFile(t, keyFile))
	assert.Contains(t, err.Error(), "server CA "+otherCA.PEM)
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")
}

// A key file that does not go with its certificate, or is not a key, and a
// CA file that holds no certificate, fail before anything is dialed, with
// an error that names the files and never holds the key's text.
func TestBadTLSFilesNameTheFileNotTheSecret(t *testing.T) {
	isolateTemporalEnv(t)
	ca := newTestCA(t, "clients")
	certFile, _ := ca.issue(t, "worker-a", false)
	_, otherKey := ca.issue(t, "worker-b", false)
	secret := readFile(t, otherKey)

	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", certFile)
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", otherKey)
	_, _, err := worker.ClientOptions(worker.ConfigFromEnv())
	require.Error(t, err)
	assertOneLineWithout(t, err, secret)
	assert.Contains(t, err.Error(), otherKey)
	assert.Contains(t, err.Error(), "private key does not match public key")

	// The same key given inline, as a secret store's variable would.
	require.NoError(t, os.Unsetenv("TEMPORAL_TLS_CLIENT_KEY_PATH"))
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_DATA", readFile(t, certFile))
	require.NoError(t, os.Unsetenv("TEMPORAL_TLS_CLIENT_CERT_PATH"))
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_DATA", secret)
	_, _, err = worker.ClientOptions(worker.ConfigFromEnv())
	require.Error(t, err)
	assertOneLineWithout(t, err, secret)
	assert.Contains(t, err.Error(), "TEMPORAL_TLS_CLIENT_KEY_DATA")

	// Not a key at all: the file's first line is the secret's shape.
	garbage := ca.write(t, "garbage-key.pem", []byte("sk_live_not_a_pem_key_0123456789abcdef\n"))
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_DATA", "")
	require.NoError(t, os.Unsetenv("TEMPORAL_TLS_CLIENT_KEY_DATA"))
	require.NoError(t, os.Unsetenv("TEMPORAL_TLS_CLIENT_CERT_DATA"))
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", certFile)
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", garbage)
	_, _, err = worker.ClientOptions(worker.ConfigFromEnv())
	require.Error(t, err)
	assertOneLineWithout(t, err, "sk_live_not_a_pem_key_0123456789abcdef")
	assert.Contains(t, err.Error(), garbage)

	// A CA file with no certificate in it.
	require.NoError(t, os.Unsetenv("TEMPORAL_TLS_CLIENT_CERT_PATH"))
	require.NoError(t, os.Unsetenv("TEMPORAL_TLS_CLIENT_KEY_PATH"))
	t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", garbage)
	_, _, err = worker.ClientOptions(worker.ConfigFromEnv())
	require.Error(t, err)
	assertOneLineWithout(t, err, "sk_live_not_a_pem_key_0123456789abcdef")
	assert.Contains(t, err.Error(), "server CA "+garbage)

	// A file whose key does not parse: the line and key, not the value.
	require.NoError(t, os.Unsetenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH"))
	bad := ca.write(t, "temporal.toml", []byte("[profile.default]\napi_key = tmprlUnquotedKey0123456789\n"))
	t.Setenv("TEMPORAL_CONFIG_FILE", bad)
	_, _, err = worker.ClientOptions(worker.ConfigFromEnv())
	require.Error(t, err)
	assertOneLineWithout(t, err, "tmprlUnquotedKey0123456789")
	assert.Contains(t, err.Error(), `line 2 (key "profile.default.api_key")`)
	assert.Contains(t, err.Error(), bad)

	// A profile that is not in the file names the profile and the file.
	require.NoError(t, os.Unsetenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH"))
	t.Setenv("TEMPORAL_PROFILE", "nope")
	_, err = worker.Dial(context.Background(), worker.ConfigFromEnv())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `profile "nope"`)
}

// An API key reaches the server as `authorization: Bearer <key>` on every
// call (the frontend refuses a call without it), over TLS the key turns on
// by itself; a wrong key is refused with an error that never holds either
// key.
func TestDialWithAnAPIKey(t *testing.T) {
	isolateTemporalEnv(t)
	serverCA := newTestCA(t, "server")
	const key = "tmprl-test-api-key-6f1d2c9a8b7e"
	frontend := startGuardedFrontend(t, serverCA, nil, key)
	t.Setenv("TEMPORAL_ADDRESS", frontend.Address)
	t.Setenv("TEMPORAL_API_KEY", key)
	t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", serverCA.PEM)
	t.Setenv("TEMPORAL_TLS_SERVER_NAME", "temporal.test")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c, err := worker.Dial(ctx, worker.ConfigFromEnv())
	require.NoError(t, err)
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
	c.Close()
	require.NoError(t, err)
	_, bearers := frontend.seen()
	require.NotEmpty(t, bearers)
	for _, b := range bearers {
		assert.Equal(t, "Bearer "+key, b)
	}

	const wrong = "tmprl-wrong-api-key-0a9b8c7d6e5f"
	t.Setenv("TEMPORAL_API_KEY", wrong)
	_, err = worker.Dial(ctx, worker.ConfigFromEnv())
	require.Error(t, err)
	assertOneLineWithout(t, err, wrong)
	assertOneLineWithout(t, err, key)
	assert.Contains(t, err.Error(), "API key")
	assert.Contains(t, err.Error(), "Unauthenticated")
}

// assertOneLineWithout checks an error is what the CLI should print: one
// line, no stack trace, and nothing of the secret (nor any 10 characters
// of it in a row).
func assertOneLineWithout(t *testing.T, err error, secret string) {
	t.Helper()
	text := err.Error()
	t.Logf("the error: %s", text)
	assert.NotContains(t, text, "\n", "one line")
	assert.NotContains(t, text, "goroutine ", "no stack trace")
	for _, line := range strings.Split(secret, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "-----") {
			continue // the PEM armour names the block type, no secret
		}
		for i := 0; i+10 <= len(line); i++ {
			if strings.Contains(text, line[i:i+10]) {
				t.Fatalf("the error holds part of the secret (%q): %s", line[i:i+10], text)
			}
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}

// deadlineRecorder is a WorkflowService that answers the worker's task
// polls and a history long poll at once, with nothing, and records the
// deadline each arrived with, as the server sees it.
type deadlineRecorder struct {
	workflowservice.UnimplementedWorkflowServiceServer
	mu        sync.Mutex
	deadlines map[string]time.Duration
}

func (d *deadlineRecorder) record(ctx context.Context, method string) {
	deadline, ok := ctx.Deadline()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !ok {
		d.deadlines[method] = -1
		return
	}
	d.deadlines[method] = time.Until(deadline)
}

func (d *deadlineRecorder) seen(method string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deadlines[method]
}

func (d *deadlineRecorder) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

func (d *deadlineRecorder) PollActivityTaskQueue(ctx context.Context, _ *workflowservice.PollActivityTaskQueueRequest) (*workflowservice.PollActivityTaskQueueResponse, error) {
	d.record(ctx, "activity")
	return &workflowservice.PollActivityTaskQueueResponse{}, nil
}

func (d *deadlineRecorder) PollWorkflowTaskQueue(ctx context.Context, _ *workflowservice.PollWorkflowTaskQueueRequest) (*workflowservice.PollWorkflowTaskQueueResponse, error) {
	d.record(ctx, "workflow")
	return &workflowservice.PollWorkflowTaskQueueResponse{}, nil
}

func (d *deadlineRecorder) GetWorkflowExecutionHistory(ctx context.Context, _ *workflowservice.GetWorkflowExecutionHistoryRequest) (*workflowservice.GetWorkflowExecutionHistoryResponse, error) {
	d.record(ctx, "history")
	return &workflowservice.GetWorkflowExecutionHistoryResponse{}, nil
}

func startDeadlineRecorder(t *testing.T) (*deadlineRecorder, string) {
	t.Helper()
	d := &deadlineRecorder{deadlines: map[string]time.Duration{}}
	return d, serveFrontend(t, grpc.NewServer(), d)
}

// The worker's task polls reach the server with a deadline of
// DefaultPollTimeout (4 s), where the SDK asks for 70 s: a paused worker's
// polls then stop taking tasks 3 s after it stopped, whatever the server's
// keepalive (docs/reliability.md). Other long polls keep their deadline;
// AGENTSAGA_POLL_TIMEOUT sets the cap, 0 turns it off, and a value the
// server would refuse (under 2 s) is an error naming the variable.
func TestTaskPollsCarryTheCappedDeadline(t *testing.T) {
	isolateTemporalEnv(t)
	recorder, address := startDeadlineRecorder(t)
	const sdkPoll = 70 * time.Second // the SDK's own poll deadline (pollTaskServiceTimeOut)

	poll := func(t *testing.T) {
		t.Helper()
		c, err := worker.Dial(context.Background(), worker.Config{TemporalAddress: address, Namespace: "default"})
		require.NoError(t, err)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), sdkPoll)
		defer cancel()
		_, err = c.WorkflowService().PollActivityTaskQueue(ctx, &workflowservice.PollActivityTaskQueueRequest{Namespace: "default"})
		require.NoError(t, err)
		_, err = c.WorkflowService().PollWorkflowTaskQueue(ctx, &workflowservice.PollWorkflowTaskQueueRequest{Namespace: "default"})
		require.NoError(t, err)
		_, err = c.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{Namespace: "default", WaitNewEvent: true})
		require.NoError(t, err)
	}

	t.Run("default", func(t *testing.T) {
		t.Setenv("AGENTSAGA_POLL_TIMEOUT", "")
		poll(t)
		for _, method := range []string{"activity", "workflow"} {
			got := recorder.seen(method)
			assert.LessOrEqual(t, got, worker.DefaultPollTimeout, "%s poll deadline", method)
			assert.Greater(t, got, worker.DefaultPollTimeout-time.Second, "%s poll deadline", method)
		}
		assert.Greater(t, recorder.seen("history"), sdkPoll-5*time.Second, "a history long poll keeps its deadline")
	})
	t.Run("set", func(t *testing.T) {
		t.Setenv("AGENTSAGA_POLL_TIMEOUT", "12s")
		poll(t)
		got := recorder.seen("activity")
		assert.LessOrEqual(t, got, 12*time.Second)
		assert.Greater(t, got, 11*time.Second)
	})
	t.Run("off", func(t *testing.T) {
		t.Setenv("AGENTSAGA_POLL_TIMEOUT", "0")
		poll(t)
		assert.Greater(t, recorder.seen("activity"), sdkPoll-5*time.Second, "the SDK's own deadline")
	})
	t.Run("too-short", func(t *testing.T) {
		t.Setenv("AGENTSAGA_POLL_TIMEOUT", "1s")
		_, _, err := worker.ClientOptions(worker.Config{TemporalAddress: address})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "AGENTSAGA_POLL_TIMEOUT")
	})
}
