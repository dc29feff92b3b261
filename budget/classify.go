package budget

// Class says whether a failure is worth another attempt.
type Class int

const (
	// Retryable: the world was briefly unhappy; another attempt may work.
	Retryable Class = iota
	// NonRetryable: the request itself is wrong; another attempt can only
	// waste budget.
	NonRetryable
	// Refusal: the call succeeded and the answer means "no". Never retried.
	Refusal
)

func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case NonRetryable:
		return "non-retryable"
	case Refusal:
		return "refusal"
	}
	return "unknown"
}

// ClassifyStatus classifies an HTTP status code. 408, 409, 425, 429 and
// 5xx are retryable; every other 4xx is not. 409 is retryable as Stripe
// means it (ARCHITECTURE.md decision 2): a request with the same idempotency key
// is still in progress, and a later attempt finds it finished. shouldRetry,
// from an x-should-retry header, overrides the status when the server sent
// one, so a server whose 409 is a lasting conflict says so with
// x-should-retry: false.
func ClassifyStatus(status int, shouldRetry *bool) Class {
	if shouldRetry != nil {
		if *shouldRetry {
			return Retryable
		}
		return NonRetryable
	}
	switch {
	case status == 408, status == 409, status == 425, status == 429, status >= 500:
		return Retryable
	case status >= 400:
		return NonRetryable
	}
	return Retryable
}
