package workflows

// DefaultSystemPrompt is the prompt a spec without one gets, for the
// external tests: unexported, since no team needs to name it.
const DefaultSystemPrompt = defaultSystemPrompt
