package main

// These tests validate docker-compose.yml with the Compose Specification's
// reference Go loader (github.com/compose-spec/compose-go/v2), the same
// library `docker compose` uses to read a project: JSON-schema validation,
// variable interpolation, path resolution, normalization and the consistency
// checks (e.g. depends_on naming a missing service) all run here. They need
// no Docker engine; they do not build the image or start any container.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"sigs.k8s.io/yaml"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/workflows"
)

const composeProjectName = "agentsaga"

// repoRoot is the module root, seen from this package's directory (the
// working directory of `go test`).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// loadCompose loads a compose document as `docker compose` would, with
// schema validation, interpolation from env, relative paths resolved against
// workingDir and consistency checks all on. When content is nil the document
// is read from filename.
func loadCompose(ctx context.Context, workingDir, filename string, content []byte, env map[string]string) (*types.Project, error) {
	details := types.ConfigDetails{
		WorkingDir:  workingDir,
		ConfigFiles: []types.ConfigFile{{Filename: filename, Content: content}},
		Environment: types.Mapping(env),
	}
	return loader.LoadWithContext(ctx, details, func(o *loader.Options) {
		o.SetProjectName(composeProjectName, true)
		o.SkipValidation = false
		o.SkipInterpolation = false
		o.SkipNormalization = false
		o.SkipConsistencyCheck = false
		o.ResolvePaths = true
	})
}

// loadRepoCompose loads the repository's docker-compose.yml with the given
// environment (nil: no variables set, so the file's defaults apply).
func loadRepoCompose(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	root := repoRoot(t)
	if env == nil {
		env = map[string]string{}
	}
	p, err := loadCompose(t.Context(), root, filepath.Join(root, "docker-compose.yml"), nil, env)
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

// checkImageRef returns an error unless image names an explicit tag other
// than "latest", or a digest.
func checkImageRef(image string) error {
	if image == "" {
		return errors.New("no image")
	}
	ref, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return fmt.Errorf("image %q: %w", image, err)
	}
	if _, ok := ref.(reference.Digested); ok {
		return nil
	}
	tagged, ok := ref.(reference.Tagged)
	if !ok {
		return fmt.Errorf("image %q has no tag (would pull latest)", image)
	}
	if tagged.Tag() == "latest" {
		return fmt.Errorf("image %q uses the latest tag", image)
	}
	return nil
}

// composeInvariants returns every violation of the rules this repository's
// compose file must follow, whatever its services are:
//   - every depends_on names an existing service;
//   - every service has an image with a pinned tag (not latest, not missing);
//   - every build context is a directory and its Dockerfile exists;
//   - every bind-mounted source exists on disk.
func composeInvariants(p *types.Project) []string {
	var problems []string
	for _, name := range p.ServiceNames() {
		svc := p.Services[name]
		for dep := range svc.DependsOn {
			if _, ok := p.Services[dep]; !ok {
				problems = append(problems, fmt.Sprintf("service %s depends_on unknown service %s", name, dep))
			}
		}
		if err := checkImageRef(svc.Image); err != nil {
			problems = append(problems, fmt.Sprintf("service %s: %v", name, err))
		}
		if b := svc.Build; b != nil {
			if st, err := os.Stat(b.Context); err != nil || !st.IsDir() {
				problems = append(problems, fmt.Sprintf("service %s: build context %q is not a directory", name, b.Context))
			}
			dockerfile := b.Dockerfile
			if dockerfile == "" {
				dockerfile = "Dockerfile"
			}
			if !filepath.IsAbs(dockerfile) {
				dockerfile = filepath.Join(b.Context, dockerfile)
			}
			if st, err := os.Stat(dockerfile); err != nil || !st.Mode().IsRegular() {
				problems = append(problems, fmt.Sprintf("service %s: Dockerfile %q does not exist", name, dockerfile))
			}
		}
		for _, v := range svc.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				problems = append(problems, fmt.Sprintf("service %s: bind mount source %q does not exist", name, v.Source))
			}
		}
	}
	return problems
}

func publishes(svc types.ServiceConfig, hostPort string) bool {
	for _, port := range svc.Ports {
		if port.Published == hostPort {
			return true
		}
	}
	return false
}

func TestComposeFileIsValid(t *testing.T) {
	root := repoRoot(t)
	p := loadRepoCompose(t, nil)

	if p.Name != composeProjectName {
		t.Errorf("project name = %q, want %q", p.Name, composeProjectName)
	}

	want := []string{"agentsaga-worker", "postgres", "temporal", "temporal-admin-tools", "temporal-create-namespace", "temporal-ui"}
	got := p.ServiceNames()
	slices.Sort(got)
	for _, name := range want {
		if !slices.Contains(got, name) {
			t.Errorf("service %q missing; services are %v", name, got)
		}
	}

	for _, problem := range composeInvariants(p) {
		t.Error(problem)
	}

	worker, err := p.GetService("agentsaga-worker")
	if err != nil {
		t.Fatal(err)
	}
	if worker.Build == nil {
		t.Fatal("agentsaga-worker has no build section")
	}
	if worker.Build.Context != root {
		t.Errorf("agentsaga-worker build context = %q, want the repo root %q", worker.Build.Context, root)
	}
	if _, err := os.Stat(filepath.Join(root, "Dockerfile")); err != nil {
		t.Errorf("Dockerfile at the repo root: %v", err)
	}
	if worker.Restart != types.RestartPolicyUnlessStopped {
		t.Errorf("agentsaga-worker restart = %q, want %q", worker.Restart, types.RestartPolicyUnlessStopped)
	}
	for _, dep := range []string{"postgres", "temporal"} {
		if _, ok := worker.DependsOn[dep]; !ok {
			t.Errorf("agentsaga-worker does not depend on %s", dep)
		}
	}

	env := map[string]string{}
	for _, key := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "DATABASE_URL"} {
		v, ok := worker.Environment[key]
		if !ok || v == nil || *v == "" {
			t.Errorf("agentsaga-worker environment lacks %s", key)
			continue
		}
		env[key] = *v
	}
	if addr := env["TEMPORAL_ADDRESS"]; addr != "" {
		host, port, _ := strings.Cut(addr, ":")
		temporal, err := p.GetService(host)
		switch {
		case err != nil:
			t.Errorf("TEMPORAL_ADDRESS %q does not name a service: %v", addr, err)
		case port != "7233" || !publishes(temporal, "7233"):
			t.Errorf("TEMPORAL_ADDRESS %q: want port 7233, served by %s", addr, host)
		}
	}
	if raw := env["DATABASE_URL"]; raw != "" {
		u, err := url.Parse(raw)
		if err != nil {
			t.Errorf("DATABASE_URL does not parse: %v", err)
		} else {
			if u.Scheme != "postgres" && u.Scheme != "postgresql" {
				t.Errorf("DATABASE_URL scheme = %q", u.Scheme)
			}
			if u.Host != "postgres:5432" {
				t.Errorf("DATABASE_URL host = %q, want postgres:5432", u.Host)
			}
			if u.Path != "/agentsaga" {
				t.Errorf("DATABASE_URL database = %q, want /agentsaga", u.Path)
			}
			if strings.Contains(raw, "${") {
				t.Errorf("DATABASE_URL is not fully interpolated: %q", raw)
			}
		}
	}

	ui, err := p.GetService("temporal-ui")
	if err != nil {
		t.Fatal(err)
	}
	if !publishes(ui, "8233") {
		t.Errorf("temporal-ui does not publish 8233; ports: %+v", ui.Ports)
	}

	// The agentsaga database comes from the init script mounted into the
	// postgres image's /docker-entrypoint-initdb.d/.
	pg, err := p.GetService("postgres")
	if err != nil {
		t.Fatal(err)
	}
	initMounted := false
	for _, v := range pg.Volumes {
		if v.Type == types.VolumeTypeBind && strings.HasPrefix(v.Target, "/docker-entrypoint-initdb.d/") &&
			v.Source == filepath.Join(root, "deploy", "postgres-init.sql") {
			initMounted = true
		}
	}
	if !initMounted {
		t.Errorf("deploy/postgres-init.sql is not mounted into /docker-entrypoint-initdb.d/; volumes: %+v", pg.Volumes)
	}
	if initSQL, err := os.ReadFile(filepath.Join(root, "deploy", "postgres-init.sql")); err != nil {
		t.Error(err)
	} else if !strings.Contains(string(initSQL), "CREATE DATABASE agentsaga") {
		t.Error("deploy/postgres-init.sql does not create the agentsaga database")
	}
	if pg.HealthCheck == nil || !strings.Contains(strings.Join(pg.HealthCheck.Test, " "), "pg_isready") {
		t.Errorf("postgres has no pg_isready healthcheck: %+v", pg.HealthCheck)
	}
}

// The file's ${VAR:-default} references resolve from the environment, and
// the same credentials reach both Temporal and the worker.
func TestComposeFileResolvesEnvironment(t *testing.T) {
	p := loadRepoCompose(t, map[string]string{
		"POSTGRES_USER":     "saga",
		"POSTGRES_PASSWORD": "s3cret",
		"AGENTSAGA_TAG":     "v1.2.3",
	})
	worker, err := p.GetService("agentsaga-worker")
	if err != nil {
		t.Fatal(err)
	}
	if got := worker.Image; got != "agentsaga:v1.2.3" {
		t.Errorf("worker image = %q, want agentsaga:v1.2.3", got)
	}
	dsn := worker.Environment["DATABASE_URL"]
	if dsn == nil || *dsn != "postgres://saga:s3cret@postgres:5432/agentsaga?sslmode=disable" {
		t.Errorf("DATABASE_URL = %v", deref(dsn))
	}
	temporal, err := p.GetService("temporal")
	if err != nil {
		t.Fatal(err)
	}
	if v := temporal.Environment["POSTGRES_PWD"]; v == nil || *v != "s3cret" {
		t.Errorf("temporal POSTGRES_PWD = %v", deref(v))
	}
	if v := temporal.Environment["POSTGRES_USER"]; v == nil || *v != "saga" {
		t.Errorf("temporal POSTGRES_USER = %v", deref(v))
	}
	schema, err := p.GetService("temporal-admin-tools")
	if err != nil {
		t.Fatal(err)
	}
	if v := schema.Environment["SQL_USER"]; v == nil || *v != "saga" {
		t.Errorf("temporal-admin-tools SQL_USER = %v", deref(v))
	}
	if v := schema.Environment["SQL_PASSWORD"]; v == nil || *v != "s3cret" {
		t.Errorf("temporal-admin-tools SQL_PASSWORD = %v", deref(v))
	}
	pg, err := p.GetService("postgres")
	if err != nil {
		t.Fatal(err)
	}
	if v := pg.Environment["POSTGRES_USER"]; v == nil || *v != "saga" {
		t.Errorf("postgres POSTGRES_USER = %v", deref(v))
	}
}

func deref(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}

// The loader must be able to say no: each broken document below is rejected
// by the same loadCompose used on the real file, while a minimal valid one
// loads (so the rejections are not an artefact of the harness).
func TestComposeLoaderRejectsBrokenDocuments(t *testing.T) {
	dir := t.TempDir()
	load := func(doc string) error {
		_, err := loadCompose(t.Context(), dir, filepath.Join(dir, "docker-compose.yml"), []byte(doc), map[string]string{})
		return err
	}

	const valid = `
services:
  web:
    image: nginx:1.27
    ports:
      - "8080:80"
`
	if err := load(valid); err != nil {
		t.Fatalf("control document rejected: %v", err)
	}

	cases := []struct {
		name, doc, wantErr string
	}{
		{
			name: "ports is not a list",
			doc: `
services:
  web:
    image: nginx:1.27
    ports: "notalist"
`,
			wantErr: "ports",
		},
		{
			name: "unknown top-level key",
			doc: `
services:
  web:
    image: nginx:1.27
servicez:
  web:
    image: nginx:1.27
`,
			wantErr: "servicez",
		},
		{
			name: "unknown service attribute",
			doc: `
services:
  web:
    image: nginx:1.27
    restart_policy: always
`,
			wantErr: "restart_policy",
		},
		{
			name: "depends_on names a missing service",
			doc: `
services:
  web:
    image: nginx:1.27
    depends_on:
      - db
`,
			wantErr: "db",
		},
		{
			name: "required variable unset",
			doc: `
services:
  web:
    image: nginx:${NGINX_TAG:?NGINX_TAG must be set}
`,
			wantErr: "NGINX_TAG",
		},
		{
			name: "not YAML",
			doc:  "services: [\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := load(tc.doc)
			if err == nil {
				t.Fatal("broken document was accepted")
			}
			t.Logf("rejected: %v", err)
			if tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not mention %q", err, tc.wantErr)
			}
		})
	}
}

// The repository rules on top of the loader (composeInvariants) must be able
// to fail too.
func TestComposeInvariantsCatchViolations(t *testing.T) {
	dir := t.TempDir()
	doc := `
services:
  untagged:
    image: postgres
  latest:
    image: temporalio/ui:latest
  digest:
    image: postgres@sha256:0000000000000000000000000000000000000000000000000000000000000000
  built:
    image: agentsaga:local
    build:
      context: ./nowhere
    volumes:
      - ./missing.sql:/docker-entrypoint-initdb.d/init.sql:ro
`
	p, err := loadCompose(t.Context(), dir, filepath.Join(dir, "docker-compose.yml"), []byte(doc), map[string]string{})
	if err != nil {
		t.Fatalf("document should load (its problems are beyond the spec): %v", err)
	}
	problems := strings.Join(composeInvariants(p), "\n")
	t.Logf("problems:\n%s", problems)
	for _, want := range []string{
		`service untagged: image "postgres" has no tag`,
		`service latest: image "temporalio/ui:latest" uses the latest tag`,
		"service built: build context",
		"service built: Dockerfile",
		"service built: bind mount source",
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("violation not reported: %s", want)
		}
	}
	if strings.Contains(problems, "service digest:") {
		t.Error("a digest-pinned image was reported")
	}
}

// The services of docker-compose.yml that make up Temporal, and the worker.
const (
	composeServer       = "temporal"
	composeSchemaJob    = "temporal-admin-tools"
	composeNamespaceJob = "temporal-create-namespace"
	composeWorker       = "agentsaga-worker"
)

// releaseTag is an explicit release, as Temporal tags its server images.
var releaseTag = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

// imageParts splits an image reference into its familiar repository name
// (temporalio/server) and its tag ("" when it has none).
func imageParts(image string) (repo, tag string) {
	ref, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", ""
	}
	if tagged, ok := ref.(reference.Tagged); ok {
		tag = tagged.Tag()
	}
	return reference.FamiliarName(ref), tag
}

func serviceEnv(svc types.ServiceConfig, key string) string {
	if v := svc.Environment[key]; v != nil {
		return *v
	}
	return ""
}

// dependsOn returns a problem unless service name waits for dep with the
// given condition.
func dependsOn(name string, svc types.ServiceConfig, dep, condition string) []string {
	d, ok := svc.DependsOn[dep]
	switch {
	case !ok:
		return []string{fmt.Sprintf("service %s does not depend on %s", name, dep)}
	case d.Condition != condition:
		return []string{fmt.Sprintf("service %s depends on %s with condition %s, want %s", name, dep, d.Condition, condition)}
	}
	return nil
}

// mountedScript returns the host file a job's entrypoint runs: the source of
// a bind mount whose target is one of the entrypoint's words.
func mountedScript(svc types.ServiceConfig) (string, bool) {
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeBind && slices.Contains(svc.Entrypoint, v.Target) {
			return v.Source, true
		}
	}
	return "", false
}

// temporalShapeProblems returns every way p departs from the Temporal shape
// of Temporal's current compose examples, which replaced the deprecated
// temporalio/auto-setup image: a one-shot admin-tools job sets up the
// schemas, the temporalio/server image of the same release starts only once
// that job succeeded, a second one-shot job creates the namespace once the
// server is healthy, and the worker starts only once that job succeeded.
func temporalShapeProblems(p *types.Project) []string {
	var problems []string
	for _, name := range p.ServiceNames() {
		if repo, _ := imageParts(p.Services[name].Image); repo == "temporalio/auto-setup" {
			problems = append(problems, fmt.Sprintf("service %s uses the deprecated temporalio/auto-setup image", name))
		}
	}
	services := map[string]types.ServiceConfig{}
	for _, name := range []string{composeServer, composeSchemaJob, composeNamespaceJob, composeWorker} {
		svc, err := p.GetService(name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("service %s: %v", name, err))
			continue
		}
		services[name] = svc
	}
	if len(services) < 4 {
		return problems
	}
	server, schema, namespace, worker := services[composeServer], services[composeSchemaJob],
		services[composeNamespaceJob], services[composeWorker]

	serverRepo, serverTag := imageParts(server.Image)
	if serverRepo != "temporalio/server" {
		problems = append(problems, fmt.Sprintf("service %s image %q is not temporalio/server", composeServer, server.Image))
	}
	if !releaseTag.MatchString(serverTag) {
		problems = append(problems, fmt.Sprintf("service %s image %q is not pinned to a release x.y.z", composeServer, server.Image))
	}
	for _, name := range []string{composeSchemaJob, composeNamespaceJob} {
		job := services[name]
		repo, tag := imageParts(job.Image)
		if repo != "temporalio/admin-tools" {
			problems = append(problems, fmt.Sprintf("service %s image %q is not temporalio/admin-tools", name, job.Image))
		}
		// admin-tools carries the schema the server needs, so it must be
		// of the server's release: 1.29.1 or 1.29.1-tctl-1.18.4-cli-1.5.0.
		if tag != serverTag && !strings.HasPrefix(tag, serverTag+"-") {
			problems = append(problems, fmt.Sprintf("service %s image %q is not of the server's release %s", name, job.Image, serverTag))
		}
		// Restarted after it succeeded, a job would run again and again.
		if job.Restart == types.RestartPolicyAlways || job.Restart == types.RestartPolicyUnlessStopped {
			problems = append(problems, fmt.Sprintf("service %s restart = %q, but it is a one-shot job", name, job.Restart))
		}
		if _, ok := mountedScript(job); !ok {
			problems = append(problems, fmt.Sprintf("service %s entrypoint %v runs no bind-mounted script", name, job.Entrypoint))
		}
	}

	problems = append(problems, dependsOn(composeServer, server, composeSchemaJob, types.ServiceConditionCompletedSuccessfully)...)
	if hc := server.HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 {
		problems = append(problems, fmt.Sprintf("service %s has no healthcheck", composeServer))
	}
	// The schema job and the server must mean the same database.
	for _, pair := range [][4]string{
		{"SQL_PLUGIN", "postgres12", "DB", "postgres12"},
		{"SQL_HOST", serviceEnv(server, "POSTGRES_SEEDS"), "POSTGRES_SEEDS", "postgres"},
		{"SQL_USER", serviceEnv(server, "POSTGRES_USER"), "POSTGRES_USER", serviceEnv(server, "POSTGRES_USER")},
	} {
		if got := serviceEnv(schema, pair[0]); got == "" || got != pair[1] {
			problems = append(problems, fmt.Sprintf("service %s %s = %q, want %q", composeSchemaJob, pair[0], got, pair[1]))
		}
		if got := serviceEnv(server, pair[2]); got == "" || got != pair[3] {
			problems = append(problems, fmt.Sprintf("service %s %s = %q, want %q", composeServer, pair[2], got, pair[3]))
		}
	}

	problems = append(problems, dependsOn(composeNamespaceJob, namespace, composeServer, types.ServiceConditionHealthy)...)
	problems = append(problems, dependsOn(composeWorker, worker, composeServer, types.ServiceConditionHealthy)...)
	problems = append(problems, dependsOn(composeWorker, worker, composeNamespaceJob, types.ServiceConditionCompletedSuccessfully)...)
	for _, key := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"} {
		if job, w := serviceEnv(namespace, key), serviceEnv(worker, key); job == "" || job != w {
			problems = append(problems, fmt.Sprintf("service %s %s = %q, the worker's is %q", composeNamespaceJob, key, job, w))
		}
	}
	return problems
}

func TestComposeTemporalShape(t *testing.T) {
	root := repoRoot(t)
	p := loadRepoCompose(t, nil)
	for _, problem := range temporalShapeProblems(p) {
		t.Error(problem)
	}
	for name, script := range map[string]string{
		composeSchemaJob:    "setup-schema.sh",
		composeNamespaceJob: "create-namespace.sh",
	} {
		svc, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := mountedScript(svc)
		if want := filepath.Join(root, "deploy", "temporal", script); got != want {
			t.Errorf("service %s runs %q, want %q", name, got, want)
		}
	}
}

// temporalShapeProblems must be able to fail: the auto-setup shape it
// replaced, and a half-done migration from it, are reported.
func TestComposeTemporalShapeCatchesViolations(t *testing.T) {
	dir := t.TempDir()
	load := func(doc string) string {
		t.Helper()
		p, err := loadCompose(t.Context(), dir, filepath.Join(dir, "docker-compose.yml"), []byte(doc), map[string]string{})
		if err != nil {
			t.Fatalf("document should load (its problems are beyond the spec): %v", err)
		}
		problems := strings.Join(temporalShapeProblems(p), "\n")
		t.Logf("problems:\n%s", problems)
		return problems
	}

	autoSetup := load(`
services:
  temporal:
    image: temporalio/auto-setup:1.29.1
  agentsaga-worker:
    image: agentsaga:local
    depends_on:
      - temporal
`)
	for _, want := range []string{
		"service temporal uses the deprecated temporalio/auto-setup image",
		"service temporal-admin-tools:",
		"service temporal-create-namespace:",
	} {
		if !strings.Contains(autoSetup, want) {
			t.Errorf("auto-setup shape: violation not reported: %s", want)
		}
	}

	halfDone := load(`
services:
  temporal-admin-tools:
    image: temporalio/admin-tools:1.28.1
    restart: unless-stopped
    environment:
      SQL_PLUGIN: mysql8
      SQL_HOST: postgres
  temporal:
    image: temporalio/server:1.29.1
    depends_on:
      - temporal-admin-tools
    environment:
      DB: postgres12
      POSTGRES_SEEDS: postgres
      POSTGRES_USER: agentsaga
  temporal-create-namespace:
    image: temporalio/admin-tools:1.29.1-tctl-1.18.4-cli-1.5.0
    depends_on:
      - temporal
    environment:
      TEMPORAL_ADDRESS: temporal:7233
      TEMPORAL_NAMESPACE: default
  agentsaga-worker:
    image: agentsaga:local
    depends_on:
      - temporal
    environment:
      TEMPORAL_ADDRESS: temporal:7233
      TEMPORAL_NAMESPACE: other
`)
	for _, want := range []string{
		`service temporal-admin-tools image "temporalio/admin-tools:1.28.1" is not of the server's release 1.29.1`,
		`service temporal-admin-tools restart = "unless-stopped"`,
		"service temporal-admin-tools entrypoint [] runs no bind-mounted script",
		"service temporal-create-namespace entrypoint [] runs no bind-mounted script",
		"service temporal depends on temporal-admin-tools with condition service_started, want service_completed_successfully",
		"service temporal has no healthcheck",
		`service temporal-admin-tools SQL_PLUGIN = "mysql8", want "postgres12"`,
		`service temporal-admin-tools SQL_USER = "", want "agentsaga"`,
		"service temporal-create-namespace depends on temporal with condition service_started, want service_healthy",
		"service agentsaga-worker does not depend on temporal-create-namespace",
		`service temporal-create-namespace TEMPORAL_NAMESPACE = "default", the worker's is "other"`,
	} {
		if !strings.Contains(halfDone, want) {
			t.Errorf("half-done shape: violation not reported: %s", want)
		}
	}
	for _, notWant := range []string{
		"auto-setup",
		"service temporal-create-namespace image",
		"service temporal image",
		"TEMPORAL_ADDRESS",
	} {
		if strings.Contains(halfDone, notWant) {
			t.Errorf("half-done shape: reported what is right: %s", notWant)
		}
	}
}

// dynamicConfigFile is a Temporal dynamic config file: each key has values,
// each under constraints (none: the value holds everywhere).
type dynamicConfigFile map[string][]struct {
	Value       any            `json:"value"`
	Constraints map[string]any `json:"constraints"`
}

// devKeepalive returns the keepalive settings `agentsaga dev` gives the dev
// server (pausedWorkerKeepalive), by dynamic config key.
func devKeepalive(t *testing.T) map[string]time.Duration {
	t.Helper()
	args := pausedWorkerKeepalive()
	values := map[string]time.Duration{}
	for i := 0; i < len(args); i += 2 {
		if args[i] != "--dynamic-config-value" || i+1 == len(args) {
			t.Fatalf("pausedWorkerKeepalive: unexpected arguments %q", args)
		}
		key, raw, _ := strings.Cut(args[i+1], "=")
		var s string
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			t.Fatalf("pausedWorkerKeepalive: %s: %v", args[i+1], err)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("pausedWorkerKeepalive: %s: %v", args[i+1], err)
		}
		values[key] = d
	}
	return values
}

// The server reads the committed dynamic config, and it has the keepalive
// settings a paused worker's takeover needs (docs/reliability.md), the same ones
// `agentsaga dev` gives the dev server.
func TestComposeDynamicConfigKeepalive(t *testing.T) {
	root := repoRoot(t)
	p := loadRepoCompose(t, nil)
	server, err := p.GetService(composeServer)
	if err != nil {
		t.Fatal(err)
	}
	path := serviceEnv(server, "DYNAMIC_CONFIG_FILE_PATH")
	if path == "" {
		t.Fatal("temporal sets no DYNAMIC_CONFIG_FILE_PATH")
	}
	want := filepath.Join(root, "deploy", "temporal", "dynamicconfig.yaml")
	source := ""
	for _, v := range server.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == path {
			source = v.Source
		}
	}
	if source != want {
		t.Fatalf("DYNAMIC_CONFIG_FILE_PATH %s is mounted from %q, want %s", path, source, want)
	}
	raw, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	var file dynamicConfigFile
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatalf("%s: %v", want, err)
	}

	dev := devKeepalive(t)
	for _, key := range []string{"frontend.keepAliveTime", "frontend.keepAliveTimeout"} {
		if dev[key] != time.Second {
			t.Errorf("agentsaga dev sets %s = %v, want 1s", key, dev[key])
		}
		values := file[key]
		if len(values) != 1 || len(values[0].Constraints) != 0 {
			t.Errorf("%s: want one value without constraints, got %+v", key, values)
			continue
		}
		s, _ := values[0].Value.(string)
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Errorf("%s = %v: not a duration", key, values[0].Value)
			continue
		}
		if d != time.Second || d != dev[key] {
			t.Errorf("%s = %v, want 1s as agentsaga dev sets it (%v)", key, d, dev[key])
		}
	}
}

// The committed dynamic config turns on the fairness keys as `agentsaga
// dev` does.
func TestComposeDynamicConfigFairness(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "temporal", "dynamicconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file dynamicConfigFile
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatal(err)
	}
	args := fairnessKeys()
	for _, key := range []string{"matching.useNewMatcher", "matching.enableFairness"} {
		values := file[key]
		if len(values) != 1 || values[0].Value != true || len(values[0].Constraints) != 0 {
			t.Errorf("dynamicconfig.yaml %s: want true without constraints, got %+v", key, values)
		}
		if !slices.Contains(args, key+"=true") {
			t.Errorf("agentsaga dev does not set %s=true (%q)", key, args)
		}
	}
}

// composeTemporalMounts is what each Temporal service of docker-compose.yml
// mounts from deploy/temporal, and nothing else: the real-server target
// (make test-cluster) starts its server with the same files, so the
// configuration tested there is the one compose ships, never a copy.
var composeTemporalMounts = map[string][]string{
	composeServer:       {"dynamicconfig.yaml"},
	composeSchemaJob:    {"setup-schema.sh"},
	composeNamespaceJob: {"create-namespace.sh"},
}

// composeUnmounted names the files of deploy/temporal that compose does not
// mount, each with the reason. A file added there (a server config for the
// real-server target, say) fails TestComposeMountsDeployTemporal until
// compose mounts it or it is listed here with why compose needs no such file.
var composeUnmounted = map[string]string{
	"config.yaml": "the static server config the real-server target starts the bare temporal-server binary with; " +
		"the temporalio/server image renders its own template from the same variables instead " +
		"(TestComposeServerConfigVariables holds the two to the same values), and it needs a " +
		"broadcast address of the container's own, which the image's entrypoint finds",
}

// deployTemporalMountProblems returns every way p's Temporal services depart
// from composeTemporalMounts, with deploy/temporal under root, and every
// file there that compose neither mounts nor excuses in unmounted.
func deployTemporalMountProblems(p *types.Project, root string, unmounted map[string]string) []string {
	var problems []string
	dir := filepath.Join(root, "deploy", "temporal")
	mounted := map[string]bool{}
	for _, name := range p.ServiceNames() {
		var got []string
		for _, v := range p.Services[name].Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			rel, err := filepath.Rel(dir, v.Source)
			inDir := err == nil && rel != "." && !strings.HasPrefix(rel, "..") && !strings.Contains(rel, string(filepath.Separator))
			if _, temporal := composeTemporalMounts[name]; temporal && !inDir {
				problems = append(problems, fmt.Sprintf("service %s mounts %s, which is not a file of deploy/temporal", name, v.Source))
				continue
			}
			if !inDir {
				continue
			}
			got = append(got, rel)
			mounted[rel] = true
			if !v.ReadOnly {
				problems = append(problems, fmt.Sprintf("service %s mounts deploy/temporal/%s read-write", name, rel))
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(composeTemporalMounts[name]))
		if !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("service %s mounts %q from deploy/temporal, want %q", name, got, want))
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return append(problems, fmt.Sprintf("deploy/temporal: %v", err))
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if _, excused := unmounted[e.Name()]; !mounted[e.Name()] && !excused {
			problems = append(problems, fmt.Sprintf("deploy/temporal/%s is not mounted by docker-compose.yml: mount it (what the real-server target runs is what compose must ship) or add it to composeUnmounted with why compose does without it", e.Name()))
		}
	}
	for name := range unmounted {
		if mounted[name] {
			problems = append(problems, fmt.Sprintf("composeUnmounted lists deploy/temporal/%s, but compose mounts it", name))
		} else if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			problems = append(problems, fmt.Sprintf("composeUnmounted lists deploy/temporal/%s: %v", name, err))
		}
	}
	return problems
}

// docker-compose.yml mounts deploy/temporal's files themselves, exactly the
// ones each Temporal service needs, read-only.
func TestComposeMountsDeployTemporal(t *testing.T) {
	root := repoRoot(t)
	for _, problem := range deployTemporalMountProblems(loadRepoCompose(t, nil), root, composeUnmounted) {
		t.Error(problem)
	}
}

// deployTemporalMountProblems must be able to fail: a server that mounts a
// copy of the dynamic config, a job that mounts its script read-write, a
// file of deploy/temporal that compose leaves out, and a stale excuse.
func TestComposeMountsDeployTemporalCatchesViolations(t *testing.T) {
	root := t.TempDir()
	for _, rel := range []string{"deploy/temporal/dynamicconfig.yaml", "deploy/temporal/setup-schema.sh",
		"deploy/temporal/create-namespace.sh", "deploy/temporal/server.yaml", "temporal/dynamicconfig.yaml"} {
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := `
services:
  temporal:
    image: temporalio/server:1.29.1
    volumes:
      - ./temporal/dynamicconfig.yaml:/etc/temporal/config/dynamicconfig/agentsaga.yaml:ro
  temporal-admin-tools:
    image: temporalio/admin-tools:1.29.1
    volumes:
      - ./deploy/temporal/setup-schema.sh:/scripts/setup-schema.sh
  temporal-create-namespace:
    image: temporalio/admin-tools:1.29.1
    volumes:
      - ./deploy/temporal/create-namespace.sh:/scripts/create-namespace.sh:ro
`
	p, err := loadCompose(t.Context(), root, filepath.Join(root, "docker-compose.yml"), []byte(doc), map[string]string{})
	if err != nil {
		t.Fatalf("document should load: %v", err)
	}
	problems := strings.Join(deployTemporalMountProblems(p, root, map[string]string{"gone.yaml": "removed"}), "\n")
	t.Logf("problems:\n%s", problems)
	for _, want := range []string{
		"service temporal mounts " + filepath.Join(root, "temporal", "dynamicconfig.yaml") + ", which is not a file of deploy/temporal",
		`service temporal mounts [] from deploy/temporal, want ["dynamicconfig.yaml"]`,
		"service temporal-admin-tools mounts deploy/temporal/setup-schema.sh read-write",
		"deploy/temporal/dynamicconfig.yaml is not mounted by docker-compose.yml",
		"deploy/temporal/server.yaml is not mounted by docker-compose.yml",
		"composeUnmounted lists deploy/temporal/gone.yaml",
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("violation not reported: %s", want)
		}
	}
	if strings.Contains(problems, "create-namespace") {
		t.Error("the namespace job's correct mount was reported")
	}
}

// temporalImageDefaults are the temporalio/server image's defaults for the
// variables its config template reads, where compose leaves them unset.
var temporalImageDefaults = map[string]string{
	"DBNAME":             "temporal",
	"VISIBILITY_DBNAME":  "temporal_visibility",
	"NUM_HISTORY_SHARDS": "4",
	"LOG_LEVEL":          "info",
	"FRONTEND_GRPC_PORT": "7233",
}

// configTemplateVar is one `env "NAME" | default "value"` of a server config
// template.
var configTemplateVar = regexp.MustCompile(`env "([A-Z0-9_]+)"(?:\s*\|\s*default "([^"]*)")?`)

// serverConfigProblems returns every variable the server config template
// reads that would leave the compose server configured otherwise than the
// real-server target: compose must set it, or the template's default must be
// the image's own.
func serverConfigProblems(template []byte, server types.ServiceConfig) []string {
	var problems []string
	seen := map[string]bool{}
	for _, m := range configTemplateVar.FindAllStringSubmatch(string(template), -1) {
		name, def := m[1], m[2]
		if seen[name+"="+def] {
			continue
		}
		seen[name+"="+def] = true
		if serviceEnv(server, name) != "" {
			continue
		}
		image, ok := temporalImageDefaults[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("deploy/temporal/config.yaml reads %s, which service %s does not set", name, composeServer))
		case def != image:
			problems = append(problems, fmt.Sprintf("deploy/temporal/config.yaml defaults %s to %q, the temporalio/server image to %q, and service %s does not set it", name, def, image, composeServer))
		}
	}
	return problems
}

// The real-server target's server config and the compose server read the
// same variables to the same values: each variable the template reads is set
// by compose or defaults as in the image, and the databases the schema job
// makes are the ones the template names.
func TestComposeServerConfigVariables(t *testing.T) {
	root := repoRoot(t)
	template, err := os.ReadFile(filepath.Join(root, "deploy", "temporal", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(configTemplateVar.FindAll(template, -1)) == 0 {
		t.Fatal("deploy/temporal/config.yaml reads no variable: not the template this test knows")
	}
	server, err := loadRepoCompose(t, nil).GetService(composeServer)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range serverConfigProblems(template, server) {
		t.Error(problem)
	}
	script, err := os.ReadFile(filepath.Join(root, "deploy", "temporal", "setup-schema.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"DBNAME", "VISIBILITY_DBNAME"} {
		if want := name + ":-" + temporalImageDefaults[name] + "}"; !strings.Contains(string(script), want) {
			t.Errorf("deploy/temporal/setup-schema.sh does not default %s as the image does (want ${%s)", name, want)
		}
	}

	// It can fail: a variable compose does not set, and a default that is
	// not the image's.
	problems := strings.Join(serverConfigProblems([]byte(`a: {{ env "TEMPORAL_TLS_MODE" }}
b: {{ env "NUM_HISTORY_SHARDS" | default "512" }}
c: {{ env "POSTGRES_SEEDS" | default "127.0.0.1" }}`), server), "\n")
	for _, want := range []string{
		"reads TEMPORAL_TLS_MODE, which service temporal does not set",
		`defaults NUM_HISTORY_SHARDS to "512", the temporalio/server image to "4"`,
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("not reported: %s; got:\n%s", want, problems)
		}
	}
	if strings.Contains(problems, "POSTGRES_SEEDS") {
		t.Errorf("a variable compose sets was reported:\n%s", problems)
	}
}

// The worker serves its probes and metrics, and compose lets it drain: its
// stop grace period outlasts the stop timeout by the margin the worker
// needs to close its clients and flush traces after the drain.
func TestComposeWorkerDrains(t *testing.T) {
	worker, err := loadRepoCompose(t, nil).GetService(composeWorker)
	if err != nil {
		t.Fatal(err)
	}
	if problem := workerDrainProblem(worker); problem != "" {
		t.Error(problem)
	}
	addr := serviceEnv(worker, "AGENTSAGA_METRICS_ADDR")
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "" && host != "0.0.0.0") {
		t.Errorf("AGENTSAGA_METRICS_ADDR = %q: want 0.0.0.0:PORT, reachable from outside the container (%v)", addr, err)
	} else if !publishes(worker, port) {
		t.Errorf("the worker does not publish its metrics port %s; ports: %+v", port, worker.Ports)
	}

	// It can fail: compose's default grace period, and no explicit timeout.
	worker.StopGracePeriod = nil
	if problem := workerDrainProblem(worker); !strings.Contains(problem, "stop_grace_period 10s is not longer than AGENTSAGA_STOP_TIMEOUT 1m0s plus 10s") {
		t.Errorf("default grace period: problem %q", problem)
	}
	delete(worker.Environment, "AGENTSAGA_STOP_TIMEOUT")
	if problem := workerDrainProblem(worker); !strings.Contains(problem, "AGENTSAGA_STOP_TIMEOUT") {
		t.Errorf("no stop timeout: problem %q", problem)
	}
}

// workerDrainProblem says why compose would kill worker mid-drain, or "".
func workerDrainProblem(worker types.ServiceConfig) string {
	raw := serviceEnv(worker, "AGENTSAGA_STOP_TIMEOUT")
	stop, err := time.ParseDuration(raw)
	if err != nil {
		// Set explicitly, so the grace period below is compared with the
		// value the worker uses, not a default that may move.
		return fmt.Sprintf("service %s AGENTSAGA_STOP_TIMEOUT %q: want an explicit duration (%v)", composeWorker, raw, err)
	}
	grace := 10 * time.Second // compose's default
	if worker.StopGracePeriod != nil {
		grace = time.Duration(*worker.StopGracePeriod)
	}
	if grace <= stop+10*time.Second {
		return fmt.Sprintf("service %s stop_grace_period %v is not longer than AGENTSAGA_STOP_TIMEOUT %v plus 10s", composeWorker, grace, stop)
	}
	return ""
}

// scriptEnv is the environment a deploy script runs in: this process's,
// without the variables the scripts read, plus env.
func scriptEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SQL_") || strings.HasPrefix(name, "TEMPORAL_") || strings.HasPrefix(name, "SETUP_") ||
			name == "DBNAME" || name == "VISIBILITY_DBNAME" || name == "PATH" {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func runScript(t *testing.T, script string, env map[string]string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "sh", script)
	cmd.Env = scriptEnv(env)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// composeEnv is the environment compose gives service name.
func composeEnv(t *testing.T, name string) map[string]string {
	t.Helper()
	svc, err := loadRepoCompose(t, nil).GetService(name)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for k, v := range svc.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	return env
}

// The schema job's script, run with the job's environment against a fake
// temporal-sql-tool: it creates, sets up and updates both databases from the
// schema dirs the admin-tools image ships, and stops at the first failure.
func TestComposeSchemaJobScript(t *testing.T) {
	script := filepath.Join(repoRoot(t), "deploy", "temporal", "setup-schema.sh")
	bin := t.TempDir()
	fake := "#!/bin/sh\necho \"$SQL_PLUGIN@$SQL_HOST:$SQL_PORT $*\" >> \"$FAKE_LOG\"\nexit \"${FAKE_EXIT:-0}\"\n"
	if err := os.WriteFile(filepath.Join(bin, "temporal-sql-tool"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, env map[string]string) ([]string, string, error) {
		log := filepath.Join(t.TempDir(), "calls")
		env["FAKE_LOG"] = log
		env["PATH"] = bin + string(os.PathListSeparator) + os.Getenv("PATH")
		out, err := runScript(t, script, env)
		data, readErr := os.ReadFile(log)
		if readErr != nil && !errors.Is(readErr, os.ErrNotExist) {
			t.Fatal(readErr)
		}
		var calls []string
		if s := strings.TrimSpace(string(data)); s != "" {
			calls = strings.Split(s, "\n")
		}
		return calls, out, err
	}

	t.Run("sets up both databases", func(t *testing.T) {
		calls, out, err := run(t, composeEnv(t, composeSchemaJob))
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		const schema = "/etc/temporal/schema/postgresql/v12"
		want := []string{
			"postgres12@postgres:5432 --db temporal create",
			"postgres12@postgres:5432 --db temporal setup-schema -v 0.0",
			"postgres12@postgres:5432 --db temporal update-schema -d " + schema + "/temporal/versioned",
			"postgres12@postgres:5432 --db temporal_visibility create",
			"postgres12@postgres:5432 --db temporal_visibility setup-schema -v 0.0",
			"postgres12@postgres:5432 --db temporal_visibility update-schema -d " + schema + "/visibility/versioned",
		}
		if !slices.Equal(calls, want) {
			t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("stops at the first failure", func(t *testing.T) {
		env := composeEnv(t, composeSchemaJob)
		env["FAKE_EXIT"] = "1"
		calls, out, err := run(t, env)
		if err == nil {
			t.Fatalf("script succeeded though temporal-sql-tool failed:\n%s", out)
		}
		if len(calls) != 1 {
			t.Errorf("calls after a failure: %q", calls)
		}
	})

	t.Run("names a missing variable", func(t *testing.T) {
		env := composeEnv(t, composeSchemaJob)
		delete(env, "SQL_HOST")
		calls, out, err := run(t, env)
		if err == nil || !strings.Contains(out, "SQL_HOST") {
			t.Errorf("err = %v, output %q: want a failure naming SQL_HOST", err, out)
		}
		if len(calls) != 0 {
			t.Errorf("temporal-sql-tool ran without SQL_HOST: %q", calls)
		}
	})
}

// The namespace job's script, run twice (as every `docker compose up` runs
// it) with the job's environment against the dev server and a namespace of
// its own: the namespace exists and has every search attribute runs use.
func TestComposeNamespaceJobScript(t *testing.T) {
	options, err := agentsagatest.DevServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	temporal := options.ExistingPath
	// The script calls `temporal`, whatever the binary's file is named.
	bin := t.TempDir()
	if err := os.Symlink(temporal, filepath.Join(bin, "temporal")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(repoRoot(t), "deploy", "temporal", "create-namespace.sh")
	namespace := fmt.Sprintf("compose-%d", time.Now().UnixNano())
	env := composeEnv(t, composeNamespaceJob)
	env["TEMPORAL_ADDRESS"] = devServer.FrontendHostPort()
	env["TEMPORAL_NAMESPACE"] = namespace
	env["SETUP_RETRY_SECONDS"] = "1"
	env["PATH"] = bin + string(os.PathListSeparator) + os.Getenv("PATH")
	for run := 1; run <= 2; run++ {
		if out, err := runScript(t, script, env); err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, out)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := devServer.Client()
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace}); err != nil {
		t.Fatalf("namespace %s: %v", namespace, err)
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	keys := workflows.SearchAttributes().GetUntypedValues()
	if len(keys) == 0 {
		t.Fatal("workflows.SearchAttributes lists no attribute")
	}
	for key := range keys {
		if got := resp.GetCustomAttributes()[key.GetName()]; got != key.GetValueType() {
			t.Errorf("search attribute %s in %s = %v, want %v", key.GetName(), namespace, got, key.GetValueType())
		}
	}

	// A server that never answers fails the job (so the worker does not
	// start) instead of hanging it.
	env["TEMPORAL_ADDRESS"] = "127.0.0.1:1"
	env["SETUP_ATTEMPTS"] = "2"
	env["SETUP_RETRY_SECONDS"] = "0"
	if out, err := runScript(t, script, env); err == nil || !strings.Contains(out, "gave up after 2 attempts") {
		t.Errorf("unreachable server: err = %v, output:\n%s", err, out)
	}
}
