package k8s

// What the manifests must agree with, read from the repository's own files
// rather than imported: importing github.com/agentsaga/agentsaga/worker into
// this module would drag the whole engine (Temporal SDK, pgx, OpenTelemetry)
// into its go.mod and tie the two modules' versions together. The worker's
// probe paths and the variables it reads are plain constants and literal
// os.Getenv calls, so go/parser reads them exactly; the few text checks
// below say why each is enough.

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// workerFacts is what the worker's source says about how it is run.
type workerFacts struct {
	// HealthPath, ReadyPath and MetricsPath, the worker package's constants.
	healthPath, readyPath, metricsPath string
	// getenv holds every variable the worker package reads by name.
	getenv map[string]bool
	// metricsAddrEnv is the variable Config.MetricsAddr is read from, and
	// stopTimeoutEnv the one StopTimeoutFromEnv reads.
	metricsAddrEnv, stopTimeoutEnv string
	// probesOnMetricsAddr: Run serves statusHandler (metrics and both
	// probes) on cfg.MetricsAddr, so one port carries all three.
	probesOnMetricsAddr bool
	// temporalEnv holds the TEMPORAL_* variables `agentsaga --help` lists.
	// envconfig, in the Temporal SDK, reads most of them, so the worker's
	// own source does not name them; the help text is where this
	// repository commits to them.
	temporalEnv map[string]bool
}

// parseGoDir parses dir's non-test Go files.
func parseGoDir(dir string) (*token.FileSet, []*ast.File, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("parse %s: %w", path, err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("%s: no Go files", dir)
	}
	return fset, files, nil
}

// getenvArg returns X when e is os.Getenv("X").
func getenvArg(e ast.Expr) (string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Getenv" {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "os" {
		return "", false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// exprString renders a selector chain such as cfg.MetricsAddr.
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return ""
}

// readWorkerFacts reads workerFacts from the worker package in workerDir
// and the CLI's help text in mainGo.
func readWorkerFacts(workerDir, mainGo string) (workerFacts, error) {
	_, files, err := parseGoDir(workerDir)
	if err != nil {
		return workerFacts{}, err
	}
	facts := workerFacts{getenv: map[string]bool{}, temporalEnv: map[string]bool{}}
	consts := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.CONST {
				for _, spec := range gen.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								consts[name.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Name.Name == "StopTimeoutFromEnv" && n.Recv == nil {
					ast.Inspect(n.Body, func(m ast.Node) bool {
						if e, ok := m.(ast.Expr); ok {
							if name, ok := getenvArg(e); ok {
								facts.stopTimeoutEnv = name
							}
						}
						return true
					})
				}
			case *ast.KeyValueExpr:
				if key, ok := n.Key.(*ast.Ident); ok && key.Name == "MetricsAddr" {
					if name, ok := getenvArg(n.Value); ok {
						facts.metricsAddrEnv = name
					}
				}
			case *ast.CallExpr:
				if name, ok := getenvArg(n); ok {
					facts.getenv[name] = true
				}
				if fn, ok := n.Fun.(*ast.Ident); ok && fn.Name == "serveStatus" && len(n.Args) == 3 {
					handler, ok := n.Args[2].(*ast.CallExpr)
					if ok && exprString(n.Args[1]) == "cfg.MetricsAddr" {
						if h, ok := handler.Fun.(*ast.Ident); ok && h.Name == "statusHandler" {
							facts.probesOnMetricsAddr = true
						}
					}
				}
			}
			return true
		})
	}
	for name, dst := range map[string]*string{"HealthPath": &facts.healthPath, "ReadyPath": &facts.readyPath, "MetricsPath": &facts.metricsPath} {
		v, ok := consts[name]
		if !ok || v == "" {
			return workerFacts{}, fmt.Errorf("%s: no string constant %s", workerDir, name)
		}
		*dst = v
	}
	if facts.metricsAddrEnv == "" {
		return workerFacts{}, fmt.Errorf("%s: no MetricsAddr: os.Getenv(...) in a Config literal", workerDir)
	}
	if facts.stopTimeoutEnv == "" {
		return workerFacts{}, fmt.Errorf("%s: StopTimeoutFromEnv reads no variable with os.Getenv", workerDir)
	}
	help, err := os.ReadFile(mainGo)
	if err != nil {
		return workerFacts{}, fmt.Errorf("the CLI's help text: %w", err)
	}
	for _, name := range regexp.MustCompile(`\bTEMPORAL_[A-Z0-9_]*[A-Z0-9]\b`).FindAllString(string(help), -1) {
		facts.temporalEnv[name] = true
	}
	return facts, nil
}

// imageFacts is what the Dockerfile's runtime stage and docker-compose.yml
// say about the worker's image.
type imageFacts struct {
	// image is the name compose builds the Dockerfile as, with its
	// variables at their defaults (agentsaga:local).
	image string
	// entrypoint and cmd are the runtime stage's, in exec form.
	entrypoint, cmd []string
	// uid and gid are the runtime stage's USER, as numbers.
	uid, gid int64
}

// distrolessUsers are the users distroless images define by name; their
// passwd files give nonroot uid and gid 65532.
var distrolessUsers = map[string]int64{"nonroot": 65532, "root": 0}

func userID(s string) (int64, error) {
	if id, ok := distrolessUsers[s]; ok {
		return id, nil
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("user %q: not a number or a distroless user", s)
	}
	return id, nil
}

// readImageFacts reads the last stage of dockerfile (the image that runs)
// and the image name compose gives the service worker in composeFile.
func readImageFacts(dockerfile, composeFile, worker string) (imageFacts, error) {
	raw, err := os.ReadFile(dockerfile)
	if err != nil {
		return imageFacts{}, err
	}
	var facts imageFacts
	user := ""
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			// A new stage inherits nothing from the one before.
			facts, user = imageFacts{}, ""
		case "USER":
			user = rest
		case "ENTRYPOINT", "CMD":
			var words []string
			if err := json.Unmarshal([]byte(rest), &words); err != nil {
				return imageFacts{}, fmt.Errorf("%s: %s %s: not in exec form: %w", dockerfile, instr, rest, err)
			}
			if strings.EqualFold(instr, "CMD") {
				facts.cmd = words
			} else {
				facts.entrypoint = words
			}
		}
	}
	if user == "" {
		return imageFacts{}, fmt.Errorf("%s: the runtime stage sets no USER (it would run as root)", dockerfile)
	}
	u, g, hasGroup := strings.Cut(user, ":")
	if facts.uid, err = userID(u); err != nil {
		return imageFacts{}, fmt.Errorf("%s: USER %s: %w", dockerfile, user, err)
	}
	facts.gid = facts.uid
	if hasGroup {
		if facts.gid, err = userID(g); err != nil {
			return imageFacts{}, fmt.Errorf("%s: USER %s: %w", dockerfile, user, err)
		}
	}

	// Only the worker's image name is read here; cmd/agentsaga's
	// compose_test.go validates the file itself with compose's own loader.
	raw, err = os.ReadFile(composeFile)
	if err != nil {
		return imageFacts{}, err
	}
	var compose struct {
		Services map[string]struct {
			Image string `json:"image"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		return imageFacts{}, fmt.Errorf("%s: %w", composeFile, err)
	}
	svc, ok := compose.Services[worker]
	if !ok || svc.Image == "" {
		return imageFacts{}, fmt.Errorf("%s: service %s has no image", composeFile, worker)
	}
	// ${VAR:-default} at its default, as with no .env file.
	facts.image = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}`).ReplaceAllString(svc.Image, "$1")
	if strings.Contains(facts.image, "$") {
		return imageFacts{}, errors.New(composeFile + ": service " + worker + " image " + svc.Image + ": a variable without a default")
	}
	return facts, nil
}
