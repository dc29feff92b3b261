package worker

// What the external tests (package worker_test) read that the package
// keeps to itself.
var (
	ClientOptions         = clientOptions
	NewMetrics            = newMetrics
	TracerProviderFromEnv = tracerProviderFromEnv
)

const (
	DefaultPollTimeout    = defaultPollTimeout
	ServiceName           = serviceName
	VersioningAutoUpgrade = versioningAutoUpgrade
	VersioningPinned      = versioningPinned
)

// ValidateDeployment is d.validate().
func ValidateDeployment(d Deployment) error { return d.validate() }
