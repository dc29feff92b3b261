package agentsaga

// What the external tests (package agentsaga_test) read that the package
// keeps to itself.
const (
	ReconcilerLoopWorkflow = reconcilerLoopWorkflow
	SearchAttributesWait   = searchAttributesWait
)

var HasSearchAttributes = hasSearchAttributes

// MustTool is NewTool for the tests' tools: it panics on an error.
func MustTool(tool Tool, err error) Tool {
	if err != nil {
		panic(err)
	}
	return tool
}
