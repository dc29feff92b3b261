package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The OpenAPI document is a valid 3.1 document (kin-openapi loads and
// validates it) and describes exactly the routes the server has: a route
// added without its description, or a description of a route that is
// gone, fails here.
func TestOpenAPIDocumentMatchesTheRoutes(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDocument)
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater(), "the document is OpenAPI %s", doc.OpenAPI)
	require.NoError(t, doc.Validate(context.Background()))

	var described []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			described = append(described, method+" "+path)
		}
	}
	w := newWorld(t)
	routes := slices.Clone(w.api.Routes())
	slices.Sort(routes)
	slices.Sort(described)
	require.Equal(t, routes, described)

	// Each operation that needs a key says which scope, and the server
	// asks for that one.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.Security != nil && len(*op.Security) == 0 {
				continue
			}
			require.NotNil(t, op.Security, "%s %s names no scope", method, path)
			require.Len(t, *op.Security, 1)
			assert.Contains(t, op.Responses.Map(), "401", "%s %s", method, path)
			assert.Contains(t, op.Responses.Map(), "403", "%s %s", method, path)
		}
	}

	a := w.do("GET", "/v1/openapi.json", "", "")
	require.Equal(t, http.StatusOK, a.status)
	assert.Equal(t, "application/json", a.header.Get("Content-Type"))
	assert.Equal(t, openAPIDocument, a.body)
	assert.True(t, strings.HasPrefix(string(a.body), "{"))
}
