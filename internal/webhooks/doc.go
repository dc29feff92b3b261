// Package webhooks owns the webhooks that tell people what a run needs
// from them (issue 44; DESIGN.md decision 22): endpoints and their
// secrets, the durable outbox of deliveries that the run event log feeds
// (migration 00031: a trigger on run_events writes a delivery in the
// statement that stores the event), and the delivery loop that every
// `agentsaga worker` and `agentsaga serve` runs.
//
// Delivery is at least once and in order per run and endpoint: a delivery
// is claimed (FOR UPDATE SKIP LOCKED, under a lease) only when no earlier
// one of its run to its endpoint is undelivered, by one of any number of
// processes. A process killed mid-send leaves its lease to expire, and the
// delivery is sent again under the same webhook-id. A 2xx answer within
// 10 s delivers it; 410 disables the endpoint; anything else is retried
// with exponential backoff and full jitter (Schedule) for RetryWindow.
// Every attempt is recorded, and any delivery can be sent again by hand.
//
// Messages are signed as Standard Webhooks specifies (webhook-id,
// webhook-timestamp, webhook-signature: v1,<base64 HMAC-SHA256 of
// id.timestamp.body>, secrets whsec_<base64>); a rotated secret still
// signs, beside the new one, for a day. The SSRF guard (Guard) checks each
// address a connection is made to, after DNS resolution, and refuses
// loopback, private, link-local, CGNAT, multicast and unspecified
// addresses unless the endpoint allows private targets; redirects are
// not followed.
package webhooks
