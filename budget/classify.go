package budget

// RetryableStatus says whether a failure with an HTTP status code is worth
// another attempt: the world was briefly unhappy, not the request itself
// wrong (a refusal, a 200 whose answer means "no", is never retried, and
// the refusal rules find it, not the status). 408, 409, 425, 429 and 5xx
// are retryable; every other 4xx is not. 409 is retryable as Stripe
// means it (ARCHITECTURE.md decision 2): a request with the same idempotency key
// is still in progress, and a later attempt finds it finished. shouldRetry,
// from an x-should-retry header, overrides the status when the server sent
// one, so a server whose 409 is a lasting conflict says so with
// x-should-retry: false.
func RetryableStatus(status int, shouldRetry *bool) bool {
	if shouldRetry != nil {
		return *shouldRetry
	}
	switch {
	case status == 408, status == 409, status == 425, status == 429, status >= 500:
		return true
	case status >= 400:
		return false
	}
	return true
}
