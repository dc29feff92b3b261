package ledger

// Aliases kept only for bench/ledgerbench.go, which another engineer is
// editing. New code names agentsagatype.X; delete this file once it does too.

import "github.com/agentsaga/agentsaga/agentsagatype"

type Run = agentsagatype.Run

const ActionCompleted = agentsagatype.ActionCompleted
