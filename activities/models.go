package activities

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// ModelFactory builds the Model a run's ModelSpec names, on the worker, for
// one call. apiKey is what the worker read from spec.APIKeyEnv ("" when the
// spec names none); httpClient is the worker's, with no retries of its own.
type ModelFactory func(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error)

// Models maps provider names to the factories of the models a worker can
// call: the built-in providers and a team's own (NewModels).
type Models struct {
	mu        sync.RWMutex
	factories map[string]ModelFactory
}

var providerName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// NewModels returns a registry of the built-in providers (scripted,
// openai for any OpenAI-compatible server, openai-responses, anthropic,
// gemini, and the enterprise routes: azure, anthropic-bedrock,
// anthropic-vertex) and of custom,
// a team's own by the name specs write in model.provider (one of these
// names replaces the built-in). A name or factory that cannot be
// registered is an error naming it.
func NewModels(custom map[string]ModelFactory) (*Models, error) {
	m := builtinModels()
	providers := make([]string, 0, len(custom))
	for provider := range custom {
		providers = append(providers, provider)
	}
	sort.Strings(providers)
	for _, provider := range providers {
		if err := m.register(provider, custom[provider]); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// builtinModels is a registry of the built-in providers.
func builtinModels() *Models {
	m := &Models{factories: map[string]ModelFactory{}}
	m.factories[agentsagatype.ProviderScripted] = func(spec agentsagatype.ModelSpec, _ string, _ *http.Client) (Model, error) {
		return scriptedModel{Turns: spec.Script, Finish: spec.ScriptFinish}, nil
	}
	m.factories[agentsagatype.ProviderOpenAI] = NewOpenAIModel
	m.factories[agentsagatype.ProviderOpenAIResponses] = newOpenAIResponsesModel
	m.factories[agentsagatype.ProviderAnthropic] = NewAnthropicModel
	m.factories[agentsagatype.ProviderAzure] = newAzureModel
	m.factories[agentsagatype.ProviderBedrock] = newBedrockModel
	m.factories[agentsagatype.ProviderVertex] = newVertexModel
	m.factories[agentsagatype.ProviderGemini] = newGeminiModel
	return m
}

// register adds (or replaces) a provider. The name is what specs write in
// model.provider: lower-case letters, digits, '_', '.' or '-'.
func (m *Models) register(provider string, factory ModelFactory) error {
	if !providerName.MatchString(provider) {
		return fmt.Errorf("models: provider name %q must be 1-64 lower-case letters, digits, '_', '.' or '-', starting with a letter", provider)
	}
	if factory == nil {
		return fmt.Errorf("models: provider %q: the factory is nil", provider)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.factories[provider] = factory
	return nil
}

// Providers lists the registered provider names, sorted.
func (m *Models) Providers() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	names := make([]string, 0, len(m.factories))
	for name := range m.factories {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Build is the Model spec names, as a worker builds it for one call:
// apiKey is what spec.APIKeyEnv holds, httpClient may be nil. It is for
// tools that talk to a spec's model outside a run (agentsaga models
// check).
func (m *Models) Build(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error) {
	return m.build(spec, apiKey, httpClient)
}

func (m *Models) build(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error) {
	m.mu.RLock()
	factory, ok := m.factories[spec.Provider]
	m.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("model.provider: no provider %q is registered on this worker (registered: %s)",
			spec.Provider, strings.Join(m.Providers(), ", "))
	}
	return factory(spec, apiKey, httpClient)
}

// defaultModels serves Activities that were built without a registry.
var defaultModels = builtinModels()
