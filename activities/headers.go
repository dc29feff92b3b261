package activities

// HTTP tool headers: `headers: {Authorization: "Bearer ${env:CRM_TOKEN}"}`.
// The spec, and so workflow history and the ledger, carry only the
// template; the worker reads the variables when it builds the request, and
// every value it read is redacted from whatever leaves the call (the
// tool's answer, error messages, and so the ledger, logs and spans), the
// way the model's API key is.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"golang.org/x/net/http/httpguts"
)

// redactedMark replaces a secret wherever it would leave the worker.
const redactedMark = "[redacted]"

// toolConfigError is a header that cannot be resolved on this worker. Its
// message names the header and the variable, never a value.
type toolConfigError struct{ msg string }

func (e *toolConfigError) Error() string { return e.msg }

// resolveHeaders reads the variables the headers name, from getenv. It
// returns the headers to send and a redactor for every value it read. An
// unset (or empty) variable is a toolConfigError naming the header and the
// variable.
func resolveHeaders(t agentsagatype.ToolSpec, getenv func(string) string) (http.Header, *redactor, error) {
	if len(t.Headers) == 0 {
		return nil, nil, nil
	}
	header := make(http.Header, len(t.Headers))
	var secrets []string
	for _, name := range slices.Sorted(maps.Keys(t.Headers)) {
		template := t.Headers[name]
		var value strings.Builder
		last := 0
		for _, m := range toolcheck.EnvRef.FindAllStringSubmatchIndex(template, -1) {
			variable := template[m[2]:m[3]]
			resolved := getenv(variable)
			if resolved == "" {
				return nil, nil, &toolConfigError{fmt.Sprintf("tool %s: header %s: environment variable %s is not set on the worker", t.Name, name, variable)}
			}
			if !httpguts.ValidHeaderFieldValue(resolved) {
				return nil, nil, &toolConfigError{fmt.Sprintf("tool %s: header %s: environment variable %s holds a character a header cannot carry (CR, LF, NUL, ...)", t.Name, name, variable)}
			}
			value.WriteString(template[last:m[0]])
			value.WriteString(resolved)
			secrets = append(secrets, resolved)
			last = m[1]
		}
		value.WriteString(template[last:])
		header.Set(name, value.String())
	}
	return header, newRedactor(secrets), nil
}

// getenv reads the worker's environment through Activities.Getenv.
func (a *Activities) getenv(name string) string {
	if a.Getenv != nil {
		return a.Getenv(name)
	}
	return os.Getenv(name)
}

// redactor replaces the secrets a call used wherever they would leave it.
// A nil redactor changes nothing.
type redactor struct {
	secrets  []string // longest first, with their JSON-escaped forms
	replacer *strings.Replacer
}

func newRedactor(values []string) *redactor {
	var secrets []string
	for _, v := range values {
		// A server that echoes the header inside JSON may escape it.
		quoted, _ := json.Marshal(v)
		escaped := string(quoted[1 : len(quoted)-1])
		for _, form := range []string{v, escaped, strings.ReplaceAll(escaped, "/", `\/`)} {
			if form != "" && !slices.Contains(secrets, form) {
				secrets = append(secrets, form)
			}
		}
	}
	if len(secrets) == 0 {
		return nil
	}
	// At one position the replacer tries its pairs in order: the longest
	// secret wins over one it contains.
	sort.SliceStable(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		pairs = append(pairs, s, redactedMark)
	}
	return &redactor{secrets: secrets, replacer: strings.NewReplacer(pairs...)}
}

// longest is the length of the longest secret, 0 for none.
func (r *redactor) longest() int {
	if r == nil {
		return 0
	}
	return len(r.secrets[0])
}

// redact replaces every secret in s.
func (r *redactor) redact(s string) string {
	if r == nil {
		return s
	}
	return r.replacer.Replace(s)
}

// redactCut is redact for text cut at a limit: a secret that straddled the
// cut left its beginning at the end, which is removed before anything is
// replaced (a shorter secret inside it would hide the rest), and again
// until no end of the text begins a secret.
func (r *redactor) redactCut(s string) string {
	if r == nil {
		return s
	}
	for {
		cut := len(s)
		for _, secret := range r.secrets {
			for n := min(len(secret)-1, len(s)); n > 0; n-- {
				if strings.HasSuffix(s, secret[:n]) {
					cut = min(cut, len(s)-n)
					break
				}
			}
		}
		if cut == len(s) {
			return r.redact(s)
		}
		s = s[:cut]
	}
}

// wrap returns err with its message redacted; errors.As still finds what
// it wraps (an HTTPError, a permanentError), so it is classified as before.
func (r *redactor) wrap(err error) error {
	if r == nil || err == nil {
		return err
	}
	return &redactedError{err: err, r: r}
}

type redactedError struct {
	err error
	r   *redactor
}

func (e *redactedError) Error() string { return e.r.redact(e.err.Error()) }
func (e *redactedError) Unwrap() error { return e.err }

// isToolConfig reports whether err is a header the worker cannot resolve.
func isToolConfig(err error) bool {
	var config *toolConfigError
	return errors.As(err, &config)
}
