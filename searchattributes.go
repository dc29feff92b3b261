package agentsaga

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentsaga/agentsaga/workflows"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// searchAttributeTypes are the typed search attributes runs keep, read
// from the one list the workflow upserts (workflows.SearchAttributes).
func searchAttributeTypes() map[string]enums.IndexedValueType {
	types := map[string]enums.IndexedValueType{}
	for key := range workflows.SearchAttributes().GetUntypedValues() {
		types[key.GetName()] = key.GetValueType()
	}
	return types
}

// RegisterSearchAttributes adds agentsaga's search attributes to the
// namespace; ones already there are left alone.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: searchAttributeTypes(),
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("agentsaga: register search attributes in %s: %w", namespace, err)
	}
	return nil
}

// HasSearchAttributes reports whether the namespace has all of them, so a
// run only upserts what the namespace can take.
func HasSearchAttributes(ctx context.Context, c client.Client, namespace string) (bool, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return false, fmt.Errorf("agentsaga: list search attributes of %s: %w", namespace, err)
	}
	for name, kind := range searchAttributeTypes() {
		if resp.GetCustomAttributes()[name] != kind {
			return false, nil
		}
	}
	return true, nil
}
