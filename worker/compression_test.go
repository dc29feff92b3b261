package worker_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/agentsaga/agentsaga/worker"
)

// encodingRecorder is a server-side stats handler that keeps the
// grpc-encoding of the last WorkflowService request it received.
type encodingRecorder struct {
	mu   sync.Mutex
	last string
}

func (r *encodingRecorder) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}
func (r *encodingRecorder) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (r *encodingRecorder) HandleConn(context.Context, stats.ConnStats) {}
func (r *encodingRecorder) HandleRPC(_ context.Context, s stats.RPCStats) {
	if h, ok := s.(*stats.InHeader); ok && h.FullMethod == workflowservice.WorkflowService_GetSystemInfo_FullMethodName {
		r.mu.Lock()
		r.last = h.Compression
		r.mu.Unlock()
	}
}

func (r *encodingRecorder) seen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

type systemInfoServer struct {
	workflowservice.UnimplementedWorkflowServiceServer
}

func (systemInfoServer) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

// A server on this host gets plain requests: gzip over loopback costs CPU
// on both sides and saves nothing. A server elsewhere keeps the SDK's
// gzip. AGENTSAGA_GRPC_COMPRESSION overrides either way, and a value it
// does not know is an error naming the variable.
func TestCompressionIsOffForAServerOnThisHost(t *testing.T) {
	isolateTemporalEnv(t)
	recorder := &encodingRecorder{}
	address := serveFrontend(t, grpc.NewServer(grpc.StatsHandler(recorder)), systemInfoServer{})

	// Dial asks the server for its system info, through the SDK's
	// interceptors and compressor, before it returns.
	encodingOfDial := func(t *testing.T) string {
		t.Helper()
		c, err := worker.Dial(context.Background(), worker.Config{TemporalAddress: address, Namespace: "default"})
		require.NoError(t, err)
		c.Close()
		return recorder.seen()
	}
	t.Run("loopback", func(t *testing.T) {
		t.Setenv("AGENTSAGA_GRPC_COMPRESSION", "")
		assert.Empty(t, encodingOfDial(t), "no compression to a server on this host")
	})
	t.Run("gzip asked for", func(t *testing.T) {
		t.Setenv("AGENTSAGA_GRPC_COMPRESSION", "gzip")
		assert.Equal(t, "gzip", encodingOfDial(t))
	})

	for address, want := range map[string]client.GrpcCompression{
		"localhost:7233":                &client.GrpcCompressionNone{},
		"[::1]:7233":                    &client.GrpcCompressionNone{},
		"127.0.0.2:7233":                &client.GrpcCompressionNone{},
		"10.0.0.7:7233":                 &client.GrpcCompressionGzip{},
		"ns.a1b2c.tmprl.cloud:7233":     &client.GrpcCompressionGzip{},
		"temporal-frontend.prod.svc:80": &client.GrpcCompressionGzip{},
	} {
		t.Setenv("AGENTSAGA_GRPC_COMPRESSION", "")
		options, _, err := worker.ClientOptions(worker.Config{TemporalAddress: address})
		require.NoError(t, err, address)
		assert.IsType(t, want, options.ConnectionOptions.GrpcCompression, address)
	}
	t.Setenv("AGENTSAGA_GRPC_COMPRESSION", "none")
	options, _, err := worker.ClientOptions(worker.Config{TemporalAddress: "10.0.0.7:7233"})
	require.NoError(t, err)
	assert.IsType(t, &client.GrpcCompressionNone{}, options.ConnectionOptions.GrpcCompression, "none asked for")

	t.Setenv("AGENTSAGA_GRPC_COMPRESSION", "zstd")
	_, _, err = worker.ClientOptions(worker.Config{TemporalAddress: "10.0.0.7:7233"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "AGENTSAGA_GRPC_COMPRESSION")
	assert.Contains(t, err.Error(), `"zstd"`)
}
