package agentsagatest

import (
	"testing"

	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/internal/workertest"
)

// Main runs a test binary's tests against a real Temporal dev server of
// their own, for tests that need more than [NewEnvironment]: a worker that
// polls, a run started with agentsaga.Start. It starts the server (on a
// free port, in memory, with agentsaga's search attributes) from
// bin/temporal at the root of the module that holds the working directory
// (`make bin/temporal` builds it; $TEMPORAL_CLI overrides the path), hands
// it to started, runs the tests, stops the server and exits. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) {
//		agentsagatest.Main(m, func(s *testsuite.DevServer) { devServer = s })
//	}
func Main(m *testing.M, started func(*testsuite.DevServer)) {
	workertest.Main(m, started)
}

// DevServerOptions are the options Main starts its server with: bin/temporal
// (found as Main finds it), an in-memory database on a free port, the
// default namespace and agentsaga's search attributes. A test that needs a
// server of its own (one it stops, or with the web UI: EnableUI and
// UIPort) passes them to testsuite.StartDevServer; one that runs the
// binary itself finds it in ExistingPath.
func DevServerOptions() (testsuite.DevServerOptions, error) {
	return workertest.DevServerOptions()
}
