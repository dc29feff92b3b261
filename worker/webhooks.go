package worker

import (
	"context"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/webhooks"
	"github.com/agentsaga/agentsaga/ledger"
)

// deliverWebhooks sends the webhook outbox's deliveries (issue 44,
// internal/webhooks) until ctx ends, then lets the attempts in flight end
// (10 s at most). Every `agentsaga worker` and `agentsaga serve` runs it:
// any number of processes share the outbox, each delivery claimed by one
// at a time. The links in a webhook start at cfg.PublicURL.
func deliverWebhooks(ctx context.Context, store *ledger.Store, cfg Config) error {
	return webhooks.NewDeliverer(ledgerdb.Of(store).Pool(), webhooks.Options{
		PublicURL: cfg.PublicURL, Logger: cfg.logger()}).Run(ctx)
}
