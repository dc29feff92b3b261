// Package refusal owns the matching of a tool's refusal rules
// (agentsagatype.RefusalRule, a tool spec's "refusal"): [Rules] compile to
// a [Matcher], which finds in a call's answer the "no" (a card declined,
// insufficient funds) that no retry may change. A bad rule fails when the
// spec loads (internal/toolcheck compiles and caches each tool's).
package refusal
