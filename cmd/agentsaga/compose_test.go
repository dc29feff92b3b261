package main

// These tests validate docker-compose.yml with the Compose Specification's
// reference Go loader (github.com/compose-spec/compose-go/v2), the same
// library `docker compose` uses to read a project: JSON-schema validation,
// variable interpolation, path resolution, normalization and the consistency
// checks (e.g. depends_on naming a missing service) all run here. They need
// no Docker engine; they do not build the image or start any container.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
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

	want := []string{"agentsaga-worker", "postgres", "temporal", "temporal-ui"}
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
