package workflows_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkflowsImportNoIO holds the rule that workflow code does no I/O:
// nothing the workflows package builds with may reach the ledger's
// Postgres driver, a model provider's SDK, the MCP SDK, the tokenizer, or
// the rooms that use them (activities, ledger). Test files are not
// counted: they may drive a worker.
func TestWorkflowsImportNoIO(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	forbidden := []string{
		"github.com/jackc/pgx",
		"github.com/openai/openai-go",
		"github.com/anthropics/anthropic-sdk-go",
		"github.com/modelcontextprotocol/go-sdk",
		"github.com/tiktoken-go/tokenizer",
		"github.com/agentsaga/agentsaga/activities",
		"github.com/agentsaga/agentsaga/internal/ledgerdb",
	}
	var reached []string
	for _, dep := range strings.Fields(string(out)) {
		for _, prefix := range forbidden {
			if dep == prefix || strings.HasPrefix(dep, prefix+"/") {
				reached = append(reached, dep)
			}
		}
	}
	require.Empty(t, reached, "workflows reaches packages that do I/O")
}

// TestSharedTypesAreStdlibOnly holds agentsagatype to the standard
// library, so that every room, workflow code included, may import it.
func TestSharedTypesAreStdlibOnly(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/agentsaga/agentsaga/agentsagatype").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, []string{"github.com/agentsaga/agentsaga/agentsagatype"}, strings.Fields(string(out)))
}
