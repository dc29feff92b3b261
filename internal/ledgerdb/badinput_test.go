package ledgerdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// hostileText is text that would change a statement built by string
// concatenation: quotes, comments, statement separators, dollar quoting,
// backslashes, format verbs, and Unicode that renders misleadingly.
var hostileText = []string{
	`'; DROP TABLE actions; --`,
	`Robert'); DROP TABLE leaf_calls;--`,
	`" OR "1"="1`,
	`\'; DELETE FROM runs; --\`,
	`$1 $$ $tag$ DROP TABLE runs $tag$`,
	`*/ ; SELECT pg_sleep(10); /*`,
	`%s %d %!v %% {{key}}`,
	`\x00 \u0000 (escapes as text, not bytes)`,
	"日本語 🚀 \u202eRTL\u202c e\u0301 \ufeffBOM",
	"line\nbreak\ttab\rreturn",
	`{"json": "value", "nested": {"x": [1, 2]}}`,
	strings.Repeat("'", 300),
}

// Every public read and write of the ledger takes hostile text as data:
// keys, workflow and run IDs, tools, arguments, results, errors, answers,
// bucket and breaker names all round-trip unchanged and every table
// survives. Together with TestLedgerSQLIsConstant this is the evidence that
// every statement is parameterized.
func TestHostileValuesAreDataEverywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	tables := ledgertest.Tables(t, store)

	for i, h := range hostileText {
		wf := fmt.Sprintf("wf-%d-%s", i, h)
		key := wf + "/" + h
		args, err := json.Marshal(map[string]string{"q": h})
		require.NoError(t, err)
		spec, err := json.Marshal(map[string]string{"goal": h})
		require.NoError(t, err)

		// Runs.
		require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: wf, RunID: h, ParentWorkflowID: h, Goal: h, Spec: spec}), h)
		run, err := store.GetRun(ctx, wf)
		require.NoError(t, err, h)
		assert.Equal(t, []string{wf, h, h, h}, []string{run.WorkflowID, run.RunID, run.ParentWorkflowID, run.Goal})
		assert.JSONEq(t, string(spec), string(run.Spec))

		// Actions, their compensation, and a rejected one.
		claim, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: key, WorkflowID: wf, ActivityID: h, Tool: h,
			Arguments: string(args), Compensation: &wire.CompensationRequest{Tool: h, ArgumentsTemplate: h}}, time.Minute)
		require.NoError(t, err, h)
		require.True(t, claim.Execute)
		done, err := store.CompleteAction(ctx, key, claim.Action.Attempts, h)
		require.NoError(t, err, h)
		assert.Equal(t, h, done.Result)
		got, err := store.GetAction(ctx, key)
		require.NoError(t, err, h)
		assert.Equal(t, []string{key, wf, h, h, string(args), h, agentsagatype.ActionCompleted},
			[]string{got.Key, got.WorkflowID, got.ActivityID, got.Tool, got.Arguments, got.Result, got.Status})
		replay, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: key, WorkflowID: wf, ActivityID: h, Tool: h, Arguments: string(args)}, time.Minute)
		require.NoError(t, err, h)
		assert.False(t, replay.Execute, "the same hostile request under its key is a replay")

		rejectedKey := key + "/rejected"
		claim, err = store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: rejectedKey, WorkflowID: wf, ActivityID: h + "/rejected", Tool: h, Arguments: string(args)}, time.Minute)
		require.NoError(t, err, h)
		rejected, err := store.FailAction(ctx, rejectedKey, claim.Action.Attempts, h, "Rejected", true)
		require.NoError(t, err, h)
		assert.Equal(t, h, rejected.Error)
		actions, err := store.ListActions(ctx, wf)
		require.NoError(t, err, h)
		require.Len(t, actions, 2, h)

		stack, err := store.CompensationStack(ctx, wf)
		require.NoError(t, err, h)
		require.Len(t, stack, 1, h)
		assert.Equal(t, []string{key, h, h, h}, []string{stack[0].ForwardKey, stack[0].Tool, stack[0].ArgumentsTemplate, stack[0].Forward.Result})
		require.NoError(t, store.SettleCompensation(ctx, key, agentsagatype.CompensationFailed, h, h), h)
		stack, err = store.CompensationStack(ctx, wf)
		require.NoError(t, err, h)
		assert.Equal(t, []string{h, h}, []string{stack[0].Error, stack[0].Reason})

		// Leaf calls.
		id, err := store.BeginLeafCall(ctx, ledgerdb.LeafCall{WorkflowID: wf, ActivityID: h, Key: key, Attempt: 1, Kind: ledgerdb.LeafTool, Target: h})
		require.NoError(t, err, h)
		require.NoError(t, store.EndLeafCall(ctx, id, errors.New(h)), h)
		leaves, err := store.ListLeafCalls(ctx, wf)
		require.NoError(t, err, h)
		require.Len(t, leaves, 1, h)
		assert.Equal(t, []string{h, key, h, h}, []string{leaves[0].ActivityID, leaves[0].Key, leaves[0].Target, leaves[0].Error})

		// The retry budget: bucket, breaker and per-run counters.
		require.NoError(t, store.EnsureBucket(ctx, h, budget.DefaultBucket), h)
		took, err := ledgertest.TakeRetryToken(ctx, store, h)
		require.NoError(t, err, h)
		assert.True(t, took)
		_, err = ledgertest.BucketLevel(ctx, store, h)
		require.NoError(t, err, h)
		_, err = store.DepositToBucket(ctx, h, 1)
		require.NoError(t, err, h)
		decision, err := store.DecideRetry(ctx, ledgerdb.RetryRequest{ChargeKey: key + "#1", WorkflowID: wf, Tool: h, ToolCap: 5,
			RunAllowance: 5, Bucket: h, Dependency: h})
		require.NoError(t, err, h)
		assert.Equal(t, budget.Granted, decision)
		counters, err := store.RunRetryCounters(ctx, wf)
		require.NoError(t, err, h)
		assert.Equal(t, map[string]int{h: 1}, counters.ToolRetries)
		require.NoError(t, store.RecordSuccess(ctx, key+"#2", h, 0.1, h, false), h)
		_, err = store.BreakerGate(ctx, h, budget.DefaultBreaker)
		require.NoError(t, err, h)
		_, err = store.BreakerReport(ctx, h, false, false, budget.DefaultBreaker)
		require.NoError(t, err, h)
		_, err = store.RunLiveCounters(ctx, wf)
		require.NoError(t, err, h)

		// The run's status and its end.
		require.NoError(t, store.SetRunStatus(ctx, wf, agentsagatype.RunEscalated, h), h)
		require.NoError(t, store.FinishRun(ctx, wf, agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted, Answer: h, HandoffNote: h, Reason: h}), h)
		run, err = store.GetRun(ctx, wf)
		require.NoError(t, err, h)
		assert.Equal(t, []string{h, h, h, h}, []string{run.StatusDetail, run.Answer, run.HandoffNote, run.Reason})
	}

	_, err := store.OpenBreakers(ctx)
	require.NoError(t, err)
	figures, err := store.FleetFigures(ctx)
	require.NoError(t, err)
	n := int64(len(hostileText))
	assert.Equal(t, n, figures.RunsByStatus[agentsagatype.RunCompleted])
	assert.Len(t, figures.Buckets, len(hostileText))
	assert.Len(t, figures.Breakers, len(hostileText))

	assert.Equal(t, tables, ledgertest.Tables(t, store), "every table survived")
	counts := ledgertest.Counts(t, store)
	for table, want := range map[string]int64{"runs": n, "actions": 2 * n, "compensations": n, "leaf_calls": n,
		"retry_buckets": n, "circuit_breakers": n, "run_retry_counters": n} {
		assert.Equal(t, want, counts[table], table)
	}
}

// Postgres text holds neither NUL nor invalid UTF-8. Free text (results,
// errors, answers, notes, reasons, details) is data the ledger must keep
// even so, so those bytes become U+FFFD; an identifier or arguments are
// refused with an error that names the operation and the byte, because
// changing one would change what it names. Either way nothing is half
// written and the ledger goes on working.
func TestNULAndInvalidUTF8(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	const wf, key = "wf-bytes", "wf-bytes/step-001-call-1-t"
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: wf, RunID: "r", Goal: "g"}))
	before := ledgertest.Counts(t, store)

	// Identifiers and arguments are refused.
	for name, tc := range map[string]struct {
		call func() error
		want string
	}{
		"NUL in key": {func() error {
			_, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: "wf\x00/x", WorkflowID: wf, ActivityID: "x", Tool: "t", Arguments: "{}"}, time.Minute)
			return err
		}, "ledger: claim"},
		"invalid UTF-8 in arguments": {func() error {
			_, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: key, WorkflowID: wf, ActivityID: "x", Tool: "t", Arguments: "{\"q\":\"\xff\"}"}, time.Minute)
			return err
		}, "ledger: claim"},
		"NUL in workflow ID": {func() error {
			return store.StartRun(ctx, agentsagatype.Run{WorkflowID: "wf\x00", RunID: "r", Goal: "g"})
		}, "ledger: start run"},
		"NUL in goal": {func() error {
			return store.StartRun(ctx, agentsagatype.Run{WorkflowID: "wf-2", RunID: "r", Goal: "g\x00"})
		}, "ledger: start run"},
		"NUL escape in spec": {func() error {
			return store.StartRun(ctx, agentsagatype.Run{WorkflowID: "wf-3", RunID: "r", Goal: "g", Spec: []byte(`{"goal":"\u0000"}`)})
		}, "ledger: start run"},
		"NUL in leaf target": {func() error {
			_, err := store.BeginLeafCall(ctx, ledgerdb.LeafCall{WorkflowID: wf, ActivityID: "a", Key: key, Attempt: 1, Kind: ledgerdb.LeafTool, Target: "t\x00"})
			return err
		}, "ledger: begin leaf call"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Regexp(t, `invalid byte sequence|unsupported Unicode escape sequence`, err.Error(), "the error says what was wrong")
		})
	}
	assert.Equal(t, before, ledgertest.Counts(t, store), "a refused write left nothing behind")

	// Free text is kept, with the bytes replaced.
	bad := "a\x00b\xffc"
	const clean = "a\uFFFDb\uFFFDc"
	claim, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: key, WorkflowID: wf, ActivityID: "step-001-call-1-t", Tool: "t", Arguments: "{}"}, time.Minute)
	require.NoError(t, err, "the ledger still works after refusing writes")
	done, err := store.CompleteAction(ctx, key, claim.Action.Attempts, bad)
	require.NoError(t, err)
	assert.Equal(t, clean, done.Result)

	claim, err = store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: key + "-2", WorkflowID: wf, ActivityID: "step-001-call-2-t", Tool: "t", Arguments: "{}"}, time.Minute)
	require.NoError(t, err)
	failed, err := store.FailAction(ctx, key+"-2", claim.Action.Attempts, bad, "HTTPError", false)
	require.NoError(t, err)
	assert.Equal(t, clean, failed.Error)
	assert.Equal(t, agentsagatype.ActionFailed, failed.Status, "recorded, so the next attempt can claim the key at once")

	id, err := store.BeginLeafCall(ctx, ledgerdb.LeafCall{WorkflowID: wf, ActivityID: "a", Key: key, Attempt: 1, Kind: ledgerdb.LeafTool, Target: "t"})
	require.NoError(t, err)
	require.NoError(t, store.EndLeafCall(ctx, id, errors.New(bad)))
	leaves, err := store.ListLeafCalls(ctx, wf)
	require.NoError(t, err)
	require.Len(t, leaves, 1)
	assert.Equal(t, "error", leaves[0].Outcome, "the leaf call was closed, not left in flight")
	assert.Equal(t, clean, leaves[0].Error)

	require.NoError(t, store.SetRunStatus(ctx, wf, agentsagatype.RunEscalated, bad))
	require.NoError(t, store.FinishRun(ctx, wf, agentsagatype.RunOutcome{Status: agentsagatype.RunFailed, Answer: bad, HandoffNote: bad, Reason: bad}),
		"a run's last write must not fail on its text: it would be retried forever")
	run, err := store.GetRun(ctx, wf)
	require.NoError(t, err)
	assert.Equal(t, []string{clean, clean, clean, clean}, []string{run.StatusDetail, run.Answer, run.HandoffNote, run.Reason})
}

// Free text longer than MaxStoredText is cut on a character boundary and
// marked, so no one writer can fill the database with one row.
func TestLongTextIsCappedWithAMarker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	const wf = "wf-long"
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: wf, RunID: "r", Goal: "g"}))
	long := strings.Repeat("é", ledgerdb.MaxStoredText) // two bytes each: twice the cap
	checkCapped := func(t *testing.T, s string) {
		t.Helper()
		assert.LessOrEqual(t, len(s), ledgerdb.MaxStoredText)
		assert.Greater(t, len(s), ledgerdb.MaxStoredText-len(ledgerdb.TextTruncatedMarker)-utf8.UTFMax)
		assert.True(t, strings.HasSuffix(s, ledgerdb.TextTruncatedMarker))
		assert.True(t, utf8.ValidString(s), "cut on a character boundary")
	}

	claim, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: wf + "/a", WorkflowID: wf, ActivityID: "a", Tool: "t", Arguments: "{}"}, time.Minute)
	require.NoError(t, err)
	done, err := store.CompleteAction(ctx, wf+"/a", claim.Action.Attempts, long)
	require.NoError(t, err)
	checkCapped(t, done.Result)

	exact := strings.Repeat("x", ledgerdb.MaxStoredText)
	claim, err = store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: wf + "/b", WorkflowID: wf, ActivityID: "b", Tool: "t", Arguments: "{}"}, time.Minute)
	require.NoError(t, err)
	done, err = store.CompleteAction(ctx, wf+"/b", claim.Action.Attempts, exact)
	require.NoError(t, err)
	assert.Equal(t, exact, done.Result, "text at the cap is stored whole")

	require.NoError(t, store.FinishRun(ctx, wf, agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted, Answer: long, Reason: "ok"}))
	run, err := store.GetRun(ctx, wf)
	require.NoError(t, err)
	checkCapped(t, run.Answer)
	assert.Equal(t, "ok", run.Reason, "short text is stored as it is")
}

// sqlMethods are the pgx calls that take SQL, with the index of their SQL
// argument.
var sqlMethods = map[string]int{"Exec": 1, "Query": 1, "QueryRow": 1, "Queue": 0, "Row": 3}

// TestLedgerSQLIsConstant is a cheap guard that every statement the ledger
// sends is a constant: string literals and package constants joined with
// +, never fmt.Sprintf or a variable, so values can only arrive as
// parameters. The one exception is an identifier quoted by pgx (CREATE
// DATABASE cannot take a parameter). It reads the package's source, so it
// also covers functions added later. The migrations' plpgsql must not build
// statements at run time either (EXECUTE).
func TestLedgerSQLIsConstant(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	// The batching the ledger's statements go through, and the public
	// handle (EnsureDatabase).
	for _, dir := range []string{"../coalesce", "../../ledger"} {
		more, err := filepath.Glob(dir + "/*.go")
		require.NoError(t, err)
		require.NotEmpty(t, more, dir)
		files = append(files, more...)
	}
	consts := map[string]bool{}
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		parsed = append(parsed, f)
		for _, decl := range f.Decls {
			if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.CONST {
				for _, spec := range gen.Specs {
					for _, ident := range spec.(*ast.ValueSpec).Names {
						consts[ident.Name] = true
					}
				}
			}
		}
	}
	var constant func(e ast.Expr) bool
	constant = func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.BasicLit:
			return e.Kind == token.STRING
		case *ast.Ident:
			return consts[e.Name]
		case *ast.ParenExpr:
			return constant(e.X)
		case *ast.SelectorExpr:
			// A statement the coalescer forwards was checked where it
			// was queued: coalesce.Row is one of sqlMethods.
			return e.Sel.Name == "checkedSQL"
		case *ast.BinaryExpr:
			return e.Op == token.ADD && constant(e.X) && constant(e.Y)
		case *ast.CallExpr:
			// pgx.Identifier{...}.Sanitize(): a quoted identifier.
			sel, ok := e.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Sanitize" {
				return false
			}
			lit, ok := sel.X.(*ast.CompositeLit)
			if !ok {
				return false
			}
			typ, ok := lit.Type.(*ast.SelectorExpr)
			return ok && typ.Sel.Name == "Identifier"
		}
		return false
	}
	statements := 0
	for _, f := range parsed {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var name string
			switch fun := call.Fun.(type) {
			case *ast.SelectorExpr:
				name = fun.Sel.Name
			case *ast.Ident:
				name = fun.Name
			default:
				return true
			}
			i, ok := sqlMethods[name]
			if !ok || len(call.Args) <= i {
				return true
			}
			statements++
			assert.True(t, constant(call.Args[i]), "%s: the SQL of %s is not a constant; pass values as parameters",
				fset.Position(call.Pos()), name)
			return true
		})
	}
	assert.Greater(t, statements, 20, "the guard found the ledger's statements")

	migrations, err := filepath.Glob("../../migrations/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	dynamic := regexp.MustCompile(`(?i)\bEXECUTE\b|\bformat\s*\(`)
	// A trigger names the function it runs with EXECUTE FUNCTION: no SQL
	// is built there.
	trigger := regexp.MustCompile(`(?i)\bEXECUTE\s+(FUNCTION|PROCEDURE)\b`)
	for _, path := range migrations {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.False(t, dynamic.Match(trigger.ReplaceAll(data, nil)), "%s builds SQL at run time", path)
	}
}
