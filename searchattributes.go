package agentsaga

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/workflows"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// searchAttributeTypes are the typed search attributes agentsaga
// registers, read from the one list of them (workflows.SearchAttributes).
func searchAttributeTypes() map[string]enums.IndexedValueType {
	return typesOf(workflows.SearchAttributes())
}

// typesOf names attributes' types.
func typesOf(attributes temporal.SearchAttributes) map[string]enums.IndexedValueType {
	types := map[string]enums.IndexedValueType{}
	for key := range attributes.GetUntypedValues() {
		types[key.GetName()] = key.GetValueType()
	}
	return types
}

// searchAttributesWait bounds how long RegisterSearchAttributes waits for
// the namespace to accept the attributes it registered.
const searchAttributesWait = 30 * time.Second

// RegisterSearchAttributes adds agentsaga's search attributes to the
// namespace (ones already there are left alone), then waits, for up to
// searchAttributesWait, until a start with them would be accepted. A
// server answers "registered" before its frontends and history hosts have
// the namespace's new mapping (each refreshes it on its own), and until
// they do a start with the attributes is refused ("Namespace ... has no
// mapping defined for search attribute AgentStatus"): a run started right
// after registering would fail. The error names the attribute that never
// became usable.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: searchAttributeTypes(),
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("agentsaga: register search attributes in %s: %w", namespace, err)
	}
	return waitUntilUsable(ctx, searchAttributesWait, func(ctx context.Context) error {
		return searchAttributesUsable(ctx, c, namespace)
	})
}

// notUsableYet is a check that may pass later: an attribute not listed
// yet, or a start refused for want of its mapping.
type notUsableYet struct{ err error }

func (e *notUsableYet) Error() string { return e.err.Error() }
func (e *notUsableYet) Unwrap() error { return e.err }

// waitUntilUsable runs check until it passes, with backoff from 100 ms to
// 2 s, for up to bound; an error that is not notUsableYet (the server
// refused the request itself) ends it at once.
func waitUntilUsable(ctx context.Context, bound time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(bound)
	delay := 100 * time.Millisecond
	for {
		err := check(ctx)
		var later *notUsableYet
		if err == nil || !errors.As(err, &later) {
			return err
		}
		if time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("%w (still, after %s)", err, bound)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting: %w)", err, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// searchAttributesUsable checks that the namespace lists every attribute
// with its type, then that a start carrying all of them is accepted: it
// starts a probe workflow on a queue no worker polls, then terminates and
// deletes it, so it leaves nothing in the namespace's list.
func searchAttributesUsable(ctx context.Context, c client.Client, namespace string) error {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("agentsaga: list search attributes of %s: %w", namespace, err)
	}
	for name, kind := range searchAttributeTypes() {
		if got, ok := resp.GetCustomAttributes()[name]; !ok {
			return &notUsableYet{fmt.Errorf("agentsaga: search attribute %s is not listed in namespace %s", name, namespace)}
		} else if got != kind {
			return fmt.Errorf("agentsaga: search attribute %s in namespace %s is a %s; agentsaga needs a %s", name, namespace, got, kind)
		}
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	id := "agentsaga-search-attribute-probe-" + hex.EncodeToString(suffix)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: "agentsaga-search-attribute-probe",
		TypedSearchAttributes: workflows.SearchAttributes(),
		WorkflowRunTimeout:    time.Minute, // gone by itself should the cleanup below fail
		StaticSummary:         "agentsaga: checks that a start with the search attributes is accepted",
	}, "agentsaga.SearchAttributeProbe")
	if err != nil {
		var invalid *serviceerror.InvalidArgument
		if errors.As(err, &invalid) {
			return &notUsableYet{fmt.Errorf("agentsaga: search attribute %s is registered in namespace %s but a start with it is refused: %w",
				namedAttribute(err.Error()), namespace, err)}
		}
		return fmt.Errorf("agentsaga: probe a start with the search attributes in %s: %w", namespace, err)
	}
	cleanup := context.WithoutCancel(ctx)
	_ = c.TerminateWorkflow(cleanup, id, run.GetRunID(), "agentsaga: search attribute probe")
	_, _ = c.WorkflowService().DeleteWorkflowExecution(cleanup, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: run.GetRunID()},
	})
	return nil
}

// namedAttribute is the attribute a server's refusal names, or all of
// them when it names none of them.
func namedAttribute(message string) string {
	var names []string
	for name := range searchAttributeTypes() {
		if strings.Contains(message, name) {
			return name
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// hasSearchAttributes reports whether the namespace has all of attributes
// registered, so a run only upserts, and a starter only sets, what the
// namespace can take. Runs ask for the progress they upsert
// (workflows.InitialSearchAttributes) alone: a namespace registered before
// AgentForkedFrom existed keeps its runs' progress.
func hasSearchAttributes(ctx context.Context, c client.Client, namespace string, attributes temporal.SearchAttributes) (bool, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return false, fmt.Errorf("agentsaga: list search attributes of %s: %w", namespace, err)
	}
	for name, kind := range typesOf(attributes) {
		if resp.GetCustomAttributes()[name] != kind {
			return false, nil
		}
	}
	return true, nil
}
