package activities

import "sync"

// credentialCache keeps, by key, what a cloud route loaded from the
// worker's credential chain (an AWS configuration, Google's or Azure's
// default credentials), for the life of the process. A model is built for
// every turn; the credential caches inside what is kept (refreshed as
// their tokens expire) are what spare each turn a trip to the chain's
// sources (a metadata server, STS, Entra ID). A load that fails is not
// kept: a worker whose credentials were fixed finds them at its next turn.
type credentialCache[T any] struct {
	mu     sync.Mutex
	loaded map[string]T
}

// get returns what is kept under key, loading it first if need be. Loads
// are made one at a time, so concurrent turns load a key once.
func (c *credentialCache[T]) get(key string, load func() (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.loaded[key]; ok {
		return v, nil
	}
	v, err := load()
	if err != nil {
		return v, err
	}
	if c.loaded == nil {
		c.loaded = map[string]T{}
	}
	c.loaded[key] = v
	return v, nil
}
