// Package activityid owns the grammar of the activity IDs the engine
// gives its activities, and of the idempotency keys made of them ([Key]):
// a step's model turn ([Model]), its graceful finish ([Finish]), a tool
// call ([Tool]), an activity beside a call ([Sub], of a [Kind]) and a
// compensation ([Compensation]). The workflows' histories record these
// IDs and the ledger keys every call by them, so they are a replay
// contract: the workflows and the compensation walk build them here, and
// nowhere else. (The benchmarks' own workflows name their activities
// themselves, and make their keys by the documented <workflow ID>/<activity
// ID>.)
package activityid
