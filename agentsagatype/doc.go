// Package agentsagatype holds the types every room of agentsaga shares:
// run, action and compensation statuses, error type names, the message
// shape, tool and model specs as data, the inputs and outputs of the
// engine's activities, and the activity and workflow names. It imports the
// standard library only, so workflow code can use all of it without
// reaching anything that does I/O (TestWorkflowsImportNoIO).
package agentsagatype
