package worker

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/log"
	"google.golang.org/grpc"
)

// connection is how this process reaches Temporal, as the `temporal` CLI
// and Temporal's SDKs read it (go.temporal.io/sdk/contrib/envconfig): the
// temporal.toml profile (TEMPORAL_CONFIG_FILE, else the user's config
// directory; the profile named by --profile or TEMPORAL_PROFILE, else
// "default"), then the TEMPORAL_* variables over it (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_CLIENT_CERT_PATH,
// TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH,
// TEMPORAL_TLS_SERVER_NAME, ...). It holds the secrets' sources, never the
// secrets, so it may be printed.
type connection struct {
	Address   string
	Namespace string
	// Profile is the profile asked for (--profile, TEMPORAL_PROFILE, else
	// "default"); only "default" may be missing from the file.
	Profile string
	// Describe says how it authenticates, naming files and variables,
	// never a key: "TLS (client cert /etc/certs/c.pem, ...), API key".
	Describe string
}

// clientOptions resolves the connection for cfg: the profile cfg.Profile
// names (or TEMPORAL_PROFILE), the TEMPORAL_* variables over it, then
// cfg.TemporalAddress and cfg.Namespace when set, then the local defaults
// (127.0.0.1:7233, namespace default). Every caller that dials Temporal
// goes through it (Dial), so `agentsaga worker`, `run`, `resume` and the
// rest connect alike. Its errors name the file or variable that is wrong
// and never carry a key.
func clientOptions(cfg Config) (client.Options, connection, error) {
	profile, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{ConfigFileProfile: cfg.Profile})
	if err != nil {
		return client.Options{}, connection{}, scrub(fmt.Errorf("worker: temporal connection: %s: %w", configSource(cfg.Profile), withheld(err)), nil)
	}
	secrets := profileSecrets(profile)
	options, err := profile.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return client.Options{}, connection{}, scrub(fmt.Errorf("worker: temporal connection: %s: %w", describeTLS(profile.TLS), err), secrets)
	}
	options.HostPort = cmp.Or(cfg.TemporalAddress, options.HostPort, DefaultTemporalAddress)
	options.Namespace = cmp.Or(cfg.Namespace, options.Namespace, defaultNamespace)
	pollTimeout, err := pollTimeoutFromEnv()
	if err != nil {
		return client.Options{}, connection{}, err
	}
	if pollTimeout > 0 {
		options.ConnectionOptions.DialOptions = append(options.ConnectionOptions.DialOptions,
			grpc.WithChainUnaryInterceptor(capPollDeadline(pollTimeout)))
	}
	if options.ConnectionOptions.GrpcCompression, err = compressionFor(options.HostPort); err != nil {
		return client.Options{}, connection{}, err
	}
	conn := connection{Address: options.HostPort, Namespace: options.Namespace, Profile: profileName(cfg.Profile), Describe: describe(profile)}
	return options, conn, nil
}

// defaultPollTimeout bounds each of the worker's long polls, where the
// SDK waits up to 70 s (and the server hands out a task until 60 s).
//
// Why: a worker that is paused (SIGSTOP, a frozen VM, a stop-the-world
// pause) or cut off without a FIN keeps its open polls at the server, and
// the server goes on handing them tasks: each retry of a call the paused
// worker held can go to it and is lost for a whole heartbeat timeout, one
// per open poll. Only the server notices a dead peer (its own keepalive
// pings, frontend.keepAliveTime, one minute by default, which Temporal
// Cloud users cannot change); the client's keepalive cannot help, since a
// stopped process sends no pings. A poll's deadline, though, is the
// client's to choose, and the server honours it: it stops matching a poll
// one second before the poll's deadline. With 4 s, the paused worker's
// polls take no task later than 3 s after it stopped, so it can swallow
// at most one retry, and a takeover costs at most about the heartbeat
// timeout plus 3 s, whatever the server's settings (5 s measured 7.6 s at
// a 3 s heartbeat timeout on a loaded machine, too near the chaos
// harness's bound of the heartbeat timeout plus 5 s). The price is an
// empty poll every 3 s per poller instead of every 60 s, and the server
// logs a throttled warning that the timeout is under 10 s.
const defaultPollTimeout = 4 * time.Second

// minPollTimeout is the shortest deadline the server accepts for a long
// poll (it refuses one under 2 s, as measured on its side), with room for
// the network.
const minPollTimeout = 3 * time.Second

// pollTimeoutFromEnv reads AGENTSAGA_POLL_TIMEOUT: a Go duration of at
// least 3 s, or 0 (or "off") for the SDK's own 70 s. Unset means
// defaultPollTimeout.
func pollTimeoutFromEnv() (time.Duration, error) {
	raw := strings.TrimSpace(os.Getenv("AGENTSAGA_POLL_TIMEOUT"))
	switch raw {
	case "":
		return defaultPollTimeout, nil
	case "0", "off":
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || (d != 0 && d < minPollTimeout) {
		return 0, fmt.Errorf("worker: AGENTSAGA_POLL_TIMEOUT %q: want a duration of at least %s (such as 4s), or 0 for the SDK's 70 s", raw, minPollTimeout)
	}
	return d, nil
}

// compressionFor reads AGENTSAGA_GRPC_COMPRESSION ("gzip" or "none") and,
// when it is unset, chooses by the server's address: none for a server on
// this host (a loopback address or localhost), gzip, the SDK's default,
// for any other.
//
// Why: the SDK gzips every request, and the server answers in kind. Over
// a network that saves bytes; over loopback it only spends CPU on both
// sides, which a worker profile of `bench fleet` put at 8% of the
// worker's (issue 46 item 5).
func compressionFor(hostPort string) (client.GrpcCompression, error) {
	switch raw := strings.TrimSpace(os.Getenv("AGENTSAGA_GRPC_COMPRESSION")); raw {
	case "gzip":
		return &client.GrpcCompressionGzip{}, nil
	case "none":
		return &client.GrpcCompressionNone{}, nil
	case "":
		if isLoopback(hostPort) {
			return &client.GrpcCompressionNone{}, nil
		}
		return &client.GrpcCompressionGzip{}, nil
	default:
		return nil, fmt.Errorf("worker: AGENTSAGA_GRPC_COMPRESSION %q: want gzip or none (unset: none for a server on this host, else gzip)", raw)
	}
}

// isLoopback reports whether hostPort names this host: localhost or a
// loopback address. A name that resolves to one is not looked up.
func isLoopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		host = hostPort
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// pollMethods are the worker's long polls for tasks; a client's other long
// polls (a workflow's result, an update's outcome) keep their deadlines.
var pollMethods = map[string]bool{
	workflowservice.WorkflowService_PollWorkflowTaskQueue_FullMethodName: true,
	workflowservice.WorkflowService_PollActivityTaskQueue_FullMethodName: true,
	workflowservice.WorkflowService_PollNexusTaskQueue_FullMethodName:    true,
}

// capPollDeadline shortens a task poll's deadline to limit. The server
// answers an empty poll a second before the deadline, so the SDK sees an
// empty response, not an error, and polls again at once.
func capPollDeadline(limit time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if pollMethods[method] {
			if deadline, ok := ctx.Deadline(); !ok || time.Until(deadline) > limit {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, limit)
				defer cancel()
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// Dial connects to Temporal as the `temporal` CLI would (the profile
// cfg.Profile or TEMPORAL_PROFILE names, the TEMPORAL_* variables over it,
// then cfg.TemporalAddress and cfg.Namespace, then 127.0.0.1:7233 and
// namespace default; see clientOptions) and checks that it answers within
// ten seconds. Its errors name the file or variable that is wrong and
// never carry a key.
func Dial(ctx context.Context, cfg Config) (client.Client, error) {
	options, conn, err := clientOptions(cfg)
	if err != nil {
		return nil, err
	}
	options.Logger = log.NewStructuredLogger(cfg.logger())
	options.MetricsHandler = cfg.MetricsHandler
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, options)
	if err != nil {
		if why := diagnoseTLS(ctx, conn.Address, options.ConnectionOptions.TLS); why != nil {
			err = fmt.Errorf("%w (gRPC: %w)", why, err)
		}
		// gRPC's message is one line; the key never reaches it, but a
		// server that echoed a header back must not put it in our error.
		return nil, scrub(fmt.Errorf("worker: temporal at %s (namespace %q, %s) did not accept a connection: %w", conn.Address, conn.Namespace, conn.Describe, err), currentSecrets(cfg))
	}
	return c, nil
}

// diagnoseTLS finds why a TLS connection failed, when gRPC cannot say: a
// server that refuses the client's certificate under TLS 1.3 does so after
// the handshake, and gRPC then reports a broken pipe or a reset. A
// handshake of our own, then a short read, gets the server's alert ("tls:
// certificate required", "tls: unknown certificate authority"). Nil when
// TLS is off or the handshake and read find nothing wrong.
func diagnoseTLS(ctx context.Context, address string, config *tls.Config) error {
	if config == nil {
		return nil
	}
	config = config.Clone()
	if config.ServerName == "" {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil
		}
		config.ServerName = host
	}
	config.NextProtos = []string{"h2"}
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: config}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	raw, err := dialer.DialContext(ctx, "tcp", address)
	if err != nil {
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return nil // nothing listens: gRPC's error says so
		}
		return fmt.Errorf("TLS handshake: %w", err)
	}
	defer raw.Close()
	// The server waits for our HTTP/2 preface, so a read that times out
	// means it kept the connection: nothing to add.
	_ = raw.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := raw.Read(make([]byte, 1)); err != nil {
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			return nil
		}
		return fmt.Errorf("TLS: the server closed the connection after the handshake: %w", err)
	}
	return nil
}

// currentSecrets re-reads the profile only to know what to scrub.
func currentSecrets(cfg Config) []string {
	profile, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{ConfigFileProfile: cfg.Profile})
	if err != nil {
		return nil
	}
	return profileSecrets(profile)
}

// connectionFromEnv resolves the address and namespace for ConfigFromEnv;
// a profile that does not load leaves them to the variables and defaults,
// and Dial reports why it does not load.
func connectionFromEnv() (address, namespace string) {
	_, conn, err := clientOptions(Config{})
	if err != nil {
		return cmp.Or(os.Getenv("TEMPORAL_ADDRESS"), DefaultTemporalAddress), cmp.Or(os.Getenv("TEMPORAL_NAMESPACE"), defaultNamespace)
	}
	return conn.Address, conn.Namespace
}

func profileName(asked string) string {
	return cmp.Or(asked, os.Getenv("TEMPORAL_PROFILE"), envconfig.DefaultConfigFileProfile)
}

func configSource(asked string) string {
	file := cmp.Or(os.Getenv("TEMPORAL_CONFIG_FILE"), envconfig.DefaultConfigFilePath())
	return fmt.Sprintf("profile %q of %s", profileName(asked), file)
}

// withheld keeps a TOML parser's message out of an error about a value
// that may be secret: for `api_key = abc123` (unquoted) the parser says
// `expected value but found "abc123" instead`. The line and key are kept.
func withheld(err error) error {
	var parse toml.ParseError
	if !errors.As(err, &parse) {
		return err
	}
	key := strings.ToLower(parse.LastKey)
	for _, secret := range []string{"api_key", "_data", "auth", "grpc_meta"} {
		if strings.Contains(key, secret) {
			return fmt.Errorf("failed parsing config: line %d (key %q) does not parse as TOML (quote a string value; the parser's message is withheld, as it may quote the value)",
				parse.Position.Line, parse.LastKey)
		}
	}
	return err
}

// describe says how a profile authenticates without saying with what.
func describe(p envconfig.ClientConfigProfile) string {
	var parts []string
	switch {
	case p.TLS != nil && p.TLS.Disabled:
		parts = append(parts, "TLS off")
	case p.TLS != nil:
		parts = append(parts, describeTLS(p.TLS))
	case p.APIKey != "":
		parts = append(parts, "TLS with the system's roots")
	default:
		parts = append(parts, "no TLS")
	}
	if p.APIKey != "" {
		parts = append(parts, "API key")
	}
	return strings.Join(parts, ", ")
}

// describeTLS names where each piece of the TLS configuration comes from.
func describeTLS(t *envconfig.ClientConfigTLS) string {
	if t == nil {
		return "no TLS"
	}
	if t.Disabled {
		return "TLS off"
	}
	source := func(path string, data []byte, variable string) string {
		switch {
		case path != "" && len(data) > 0:
			return "both " + path + " and inline data"
		case path != "":
			return path
		case len(data) > 0:
			return "inline data (" + variable + " or the profile)"
		}
		return ""
	}
	var parts []string
	if s := source(t.ClientCertPath, t.ClientCertData, "TEMPORAL_TLS_CLIENT_CERT_DATA"); s != "" {
		parts = append(parts, "client cert "+s)
	}
	if s := source(t.ClientKeyPath, t.ClientKeyData, "TEMPORAL_TLS_CLIENT_KEY_DATA"); s != "" {
		parts = append(parts, "client key "+s)
	}
	if s := source(t.ServerCACertPath, t.ServerCACertData, "TEMPORAL_TLS_SERVER_CA_CERT_DATA"); s != "" {
		parts = append(parts, "server CA "+s)
	} else {
		parts = append(parts, "server CA: the system's roots")
	}
	if t.ServerName != "" {
		parts = append(parts, "server name "+t.ServerName)
	}
	if t.DisableHostVerification {
		parts = append(parts, "host verification off")
	}
	return "TLS (" + strings.Join(parts, ", ") + ")"
}

// profileSecrets are the values no error may carry: the API key, the
// private key's data and the gRPC metadata (which may hold a token).
func profileSecrets(p envconfig.ClientConfigProfile) []string {
	var secrets []string
	if p.APIKey != "" {
		secrets = append(secrets, p.APIKey)
	}
	if p.TLS != nil && len(p.TLS.ClientKeyData) > 0 {
		secrets = append(secrets, string(p.TLS.ClientKeyData))
		// Also any one line of it, should a parser quote a line.
		for _, line := range strings.Split(string(p.TLS.ClientKeyData), "\n") {
			if line = strings.TrimSpace(line); len(line) >= 16 && !strings.HasPrefix(line, "-----") {
				secrets = append(secrets, line)
			}
		}
	}
	for _, v := range p.GRPCMeta {
		secrets = append(secrets, v)
	}
	if p.Codec != nil && p.Codec.Auth != "" {
		secrets = append(secrets, p.Codec.Auth)
	}
	return secrets
}

// scrubbed is an error whose text has every secret replaced; it still
// unwraps, so errors.Is finds a deadline or a refused connection.
type scrubbed struct {
	text string
	err  error
}

func (e *scrubbed) Error() string { return e.text }
func (e *scrubbed) Unwrap() error { return e.err }

// scrub replaces the secrets in err's text and folds it onto one line: the
// CLI prints errors as they are, and a line per error is what a log and a
// terminal show whole.
func scrub(err error, secrets []string) error {
	text := err.Error()
	for _, s := range secrets {
		if len(s) >= 4 {
			text = strings.ReplaceAll(text, s, "[redacted]")
		}
	}
	return &scrubbed{text: strings.Join(strings.Fields(text), " "), err: err}
}
