package activities

import (
	"context"
	"fmt"
	"net/http"

	"github.com/anthropics/anthropic-sdk-go/bedrock"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// newBedrockModel builds a model for spec on Amazon Bedrock: Anthropic's
// model spec.Name (a Bedrock model id or inference profile) in region
// spec.Region, streamed from
// https://bedrock-runtime.REGION.amazonaws.com/model/{model}/invoke-with-response-stream
// (spec.BaseURL, when set, replaces that root: a VPC endpoint, a test
// server). Requests carry the Messages API's body (anthropic_version
// bedrock-2023-05-31) and are decoded as the anthropic provider's are.
//
// Credentials come from the AWS default chain, read on the worker on
// purpose: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN), AWS_PROFILE and the shared config and credentials
// files (SSO included), web identity, the ECS task role or the EC2
// instance role; requests are signed with SigV4. A Bedrock API key in
// AWS_BEARER_TOKEN_BEDROCK, when set, is sent instead as a bearer token
// (the SDK's rule). model.api_key_env is not used. httpClient may be nil
// to use the SDK's default; the SDK's own retries are off, and the AWS
// configuration's retryer is never used for the model's requests (only
// its credentials and region are).
func newBedrockModel(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error) {
	if spec.Provider != agentsagatype.ProviderBedrock {
		return nil, fmt.Errorf("anthropic-bedrock model: provider is %q, want %q", spec.Provider, agentsagatype.ProviderBedrock)
	}
	switch {
	case spec.Name == "":
		return nil, fmt.Errorf("anthropic-bedrock model: model.name (the Bedrock model id, for example anthropic.claude-sonnet-4-5-20250929-v1:0) is empty")
	case spec.Region == "":
		return nil, fmt.Errorf("anthropic-bedrock model: model.region (the AWS region, for example us-east-1) is empty")
	case spec.APIKeyEnv != "" || apiKey != "":
		return nil, fmt.Errorf("anthropic-bedrock model: model.api_key_env is not used: credentials come from the AWS default chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, a role)")
	}
	cfg, err := awsConfig(spec.Region)
	if err != nil {
		return nil, fmt.Errorf("anthropic-bedrock model: the AWS configuration for region %s does not load: %v", spec.Region, err)
	}
	if cfg.Credentials != nil {
		cfg.Credentials = explainedAWSCredentials{cfg.Credentials}
	}
	// WithoutEnvironmentDefaults comes first as well as inside
	// bedrock.WithConfig: no ANTHROPIC_* variable may add a credential.
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithMaxRetries(0)}
	if httpClient != nil {
		opts = append(opts, option.WithHTTPClient(httpClient))
	}
	opts = append(opts, bedrock.WithConfig(cfg))
	if spec.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(spec.BaseURL))
	}
	return newAnthropicModel(spec, "", opts), nil
}

// awsConfig is the AWS configuration of a region; a test puts a loader of
// its own in its place.
var awsConfig = defaultAWSConfig

var awsConfigs credentialCache[aws.Config]

// defaultAWSConfig is the AWS default configuration of region, loaded once
// per process: its credentials cache keeps what the chain gave until it
// expires. (bedrock.WithLoadDefaultConfig would panic on an error.)
func defaultAWSConfig(region string) (aws.Config, error) {
	return awsConfigs.get(region, func() (aws.Config, error) {
		return config.LoadDefaultConfig(context.Background(), config.WithRegion(region))
	})
}

// explainedAWSCredentials says, when the default chain finds no
// credentials, where they were looked for; the chain's own error says
// what went wrong.
type explainedAWSCredentials struct{ aws.CredentialsProvider }

func (c explainedAWSCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	creds, err := c.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return creds, fmt.Errorf("anthropic-bedrock: no AWS credentials from the default chain "+
			"(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared files, web identity, the ECS or EC2 role): %w", err)
	}
	return creds, nil
}
