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
