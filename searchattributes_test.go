package agentsaga_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/workflows"
)

// On a namespace created by the test, RegisterSearchAttributes returns
// only once a start with the attributes is accepted: the run started right
// after it is, with every attribute. Registering again is a no-op, and the
// probe it starts leaves nothing running in the namespace.
func TestRegisteredSearchAttributesAreUsableAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	namespace := fmt.Sprintf("sa-%d", time.Now().UnixNano())
	_, err := devServer.Client().WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
	require.NoError(t, err)
	c, err := client.DialContext(ctx, client.Options{HostPort: devServer.FrontendHostPort(), Namespace: namespace})
	require.NoError(t, err)
	defer c.Close()
	// A namespace is served once every host has it; the registration's
	// own wait covers its search attributes, not the namespace.
	require.Eventually(t, func() bool {
		_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)

	// What the wait retries on: a start with an attribute the namespace
	// has no mapping for is refused as an invalid argument naming it.
	_, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "too-early", TaskQueue: "nobody-polls",
		TypedSearchAttributes: workflows.SearchAttributes()}, "Anything")
	var invalid *serviceerror.InvalidArgument
	require.ErrorAs(t, err, &invalid)
	assert.Contains(t, err.Error(), "search attribute")

	require.NoError(t, agentsaga.RegisterSearchAttributes(ctx, c, namespace))
	has, err := agentsaga.HasSearchAttributes(ctx, c, namespace, workflows.SearchAttributes())
	require.NoError(t, err)
	assert.True(t, has)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "with-attributes", TaskQueue: "nobody-polls",
		TypedSearchAttributes: workflows.SearchAttributes()}, "Anything")
	require.NoError(t, err, "a start right after registering is accepted")
	require.NoError(t, c.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "test over"))

	require.NoError(t, agentsaga.RegisterSearchAttributes(ctx, c, namespace), "registering twice")
	// The list is Temporal's visibility, which learns of a termination
	// after it happened: under the suite's load a terminated probe was
	// once still listed as running. Nothing may stay running.
	var open *workflowservice.ListWorkflowExecutionsResponse
	assert.Eventually(t, func() bool {
		open, err = c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: `ExecutionStatus = "Running"`})
		return err == nil && len(open.GetExecutions()) == 0
	}, 30*time.Second, 200*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, open.GetExecutions(), "the probe runs nothing")
}

// A namespace that does not exist fails at once, naming it, rather than
// waiting out the bound.
func TestRegisterSearchAttributesInAMissingNamespace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := agentsaga.RegisterSearchAttributes(ctx, devServer.Client(), "no-such-namespace")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-namespace")
	assert.Less(t, time.Since(start), agentsaga.SearchAttributesWait/2)
}
