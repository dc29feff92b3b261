package k8s

// These tests render kustomization.yaml with kustomize's own library (the
// one `kubectl apply -k` embeds), decode every object strictly into the
// k8s.io/api types, and check what a worker needs from its pod against the
// worker's source, the Dockerfile and docker-compose.yml. They need no
// cluster. Strict decoding matters because kubectl's default field
// validation only warns: a misspelt `livenessprobe:` would be dropped on
// apply and the worker would run without a probe.

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	kustomizetypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	// repoRoot is the main module's root, from this directory.
	repoRoot = "../.."
	// workerContainer is the Deployment's container that runs the worker.
	workerContainer = "worker"
	// composeWorker is the worker's service in docker-compose.yml.
	composeWorker = "agentsaga-worker"
	// graceMargin is how much longer than the stop timeout the pod's grace
	// period must be: after the drain the worker still closes its Temporal
	// client, flushes traces (up to 5 s) and stops the probe server (up to
	// 5 s) before it exits.
	graceMargin = 10 * time.Second
)

// objects are the rendered manifests, decoded.
type objects struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  []*corev1.ConfigMap
}

// render builds the kustomization in dir, as `kubectl apply -k dir` would,
// and returns each object as YAML.
func render(dir string) ([][]byte, error) {
	var k kustomizetypes.Kustomization
	raw, err := filesys.MakeFsOnDisk().ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	// kustomize itself ignores a field it does not know, so a misspelt
	// `resource:` would render nothing without complaint.
	if err := unmarshalStrict(raw, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var docs [][]byte
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		docs = append(docs, doc)
	}
	return docs, nil
}

// unmarshalStrict decodes the YAML doc into v as the API server decodes a
// request with fieldValidation=Strict: converted to JSON without looking at
// v (as kubectl sends it, so a number where a string goes fails), then
// decoded case-sensitively with sigs.k8s.io/json, failing on duplicate and
// unknown fields. encoding/json, under sigs.k8s.io/yaml's own
// UnmarshalStrict, matches field names case-insensitively and would take
// `livenessprobe:` for livenessProbe, where the server drops it.
func unmarshalStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// decodeStrict decodes doc into the k8s.io/api type its apiVersion and kind
// name, and fails on any field that type does not have, a duplicate key or
// a value of the wrong type (a quantity that does not parse, a string
// where a number goes).
func decodeStrict(doc []byte) (any, error) {
	var meta struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, err
	}
	var obj any
	switch gvk := meta.GroupVersionKind(); gvk.GroupVersion().String() + " " + gvk.Kind {
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	default:
		return nil, fmt.Errorf("%s %s %q: not a kind these tests check; add it to decodeStrict and problems", meta.APIVersion, meta.Kind, meta.Metadata.Name)
	}
	if err := unmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s %q: %w", meta.Kind, meta.Metadata.Name, err)
	}
	return obj, nil
}

func decodeAll(docs [][]byte) (objects, error) {
	var o objects
	for _, doc := range docs {
		obj, err := decodeStrict(doc)
		if err != nil {
			return objects{}, err
		}
		switch obj := obj.(type) {
		case *appsv1.Deployment:
			o.deployments = append(o.deployments, obj)
		case *corev1.Service:
			o.services = append(o.services, obj)
		case *corev1.ConfigMap:
			o.configMaps = append(o.configMaps, obj)
		default:
			return objects{}, fmt.Errorf("%T: the kustomization renders it, but a real one must not be in git", obj)
		}
	}
	return o, nil
}

// loadSecretExample decodes secret.example.yaml, the Secret the Deployment
// reads (applied by hand, not by the kustomization).
func loadSecretExample(path string) (*corev1.Secret, error) {
	raw, err := filesys.MakeFsOnDisk().ReadFile(path)
	if err != nil {
		return nil, err
	}
	obj, err := decodeStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, want a Secret", path, obj)
	}
	return s, nil
}

// containerPort resolves a probe's or a Service's port (a number or a
// port's name) to a port of c.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, port := range c.Ports {
		if (p.Type == intstr.String && port.Name == p.StrVal) || (p.Type == intstr.Int && port.ContainerPort == p.IntVal) {
			return port.ContainerPort, true
		}
	}
	return 0, false
}

// secretish says whether an environment variable holds a credential, so it
// must come from a Secret and never be written into a manifest.
func secretish(name string) bool {
	return name == "DATABASE_URL" || strings.HasSuffix(name, "_API_KEY") || strings.Contains(name, "PASSWORD") ||
		strings.Contains(name, "TOKEN") || strings.HasSuffix(name, "_KEY_DATA")
}

// modelKey says whether name is a model API key: a variable a run spec's
// model.api_key_env names, read by that name, so no source names it.
func modelKey(name string) bool {
	return strings.HasSuffix(name, "_API_KEY") && !strings.HasPrefix(name, "TEMPORAL_")
}

// nameProblems checks the names the API server would reject.
func nameProblems(what string, meta metav1.ObjectMeta) []string {
	var out []string
	for _, msg := range validation.IsDNS1123Subdomain(meta.Name) {
		out = append(out, fmt.Sprintf("%s name %q: %s", what, meta.Name, msg))
	}
	for k, v := range meta.Labels {
		for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
			out = append(out, fmt.Sprintf("%s label %s=%s: %s", what, k, v, msg))
		}
	}
	return out
}

// problems returns every way the rendered manifests fail the worker, each
// naming what is wrong.
func problems(o objects, secret *corev1.Secret, w workerFacts, img imageFacts) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	if len(o.deployments) != 1 {
		add("want one Deployment, got %d", len(o.deployments))
		return out
	}
	d := o.deployments[0]
	out = append(out, nameProblems("Deployment", d.ObjectMeta)...)
	pod := d.Spec.Template.Spec
	podLabels := labels.Set(d.Spec.Template.Labels)
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(podLabels) {
		add("Deployment selector %v does not select its pods' labels %v (err %v)", d.Spec.Selector, podLabels, err)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "0" {
		add("Deployment rollingUpdate.maxUnavailable must be 0, so an old worker drains only once a new one is ready")
	}

	var c *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == workerContainer {
			c = &pod.Containers[i]
		}
	}
	if c == nil {
		add("Deployment has no container %q", workerContainer)
		return out
	}

	// The image: compose's, run as the Dockerfile says.
	if c.Image != img.image {
		add("container image %q, want %q as docker-compose.yml builds the Dockerfile", c.Image, img.image)
	}
	if len(c.Command) != 0 {
		add("container command %q replaces the Dockerfile's ENTRYPOINT %q", c.Command, img.entrypoint)
	}
	if len(img.entrypoint) == 0 {
		add("the Dockerfile has no ENTRYPOINT for the args to follow")
	}
	if !slices.Equal(c.Args, img.cmd) || len(c.Args) == 0 || c.Args[0] != "worker" {
		add("container args %q, want [worker] as the Dockerfile's CMD %q", c.Args, img.cmd)
	}

	// The environment: each variable once, each one the worker reads.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			add("env %s is set twice", e.Name)
		}
		env[e.Name] = e
		for _, msg := range validation.IsEnvVarName(e.Name) {
			add("env %s: %s", e.Name, msg)
		}
		if !w.getenv[e.Name] && !w.temporalEnv[e.Name] && !modelKey(e.Name) {
			add("env %s: the worker does not read it (not an os.Getenv in worker/, not in the CLI's TEMPORAL_* help, not a model API key)", e.Name)
		}
	}
	if len(c.EnvFrom) != 0 {
		add("container envFrom: name each variable instead, so this test can check each one")
	}
	for _, name := range []string{w.metricsAddrEnv, w.stopTimeoutEnv, "DATABASE_URL", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"} {
		if e, ok := env[name]; !ok || (e.Value == "" && e.ValueFrom == nil) {
			add("env %s is not set explicitly", name)
		}
	}

	// Credentials from the Secret, every reference to one of its keys.
	for _, e := range c.Env {
		if secretish(e.Name) && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			add("env %s holds a credential: it must come from a secretKeyRef, not a literal or a ConfigMap", e.Name)
		}
		if e.ValueFrom == nil {
			continue
		}
		if ref := e.ValueFrom.SecretKeyRef; ref != nil {
			_, inData := secret.Data[ref.Key]
			_, inString := secret.StringData[ref.Key]
			switch {
			case ref.Name != secret.Name:
				add("env %s: secretKeyRef names Secret %q, the example is %q", e.Name, ref.Name, secret.Name)
			case !inData && !inString:
				add("env %s: secretKeyRef key %q is not a key of Secret %q (secret.example.yaml)", e.Name, ref.Key, secret.Name)
			}
			if e.Name == "DATABASE_URL" && ref.Optional != nil && *ref.Optional {
				add("env DATABASE_URL is optional: without it the worker would start on its loopback default")
			}
		}
		if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
			found := false
			for _, cm := range o.configMaps {
				if _, ok := cm.Data[ref.Key]; ok && cm.Name == ref.Name {
					found = true
				}
			}
			if !found {
				add("env %s: configMapKeyRef %s/%s is no key of a rendered ConfigMap", e.Name, ref.Name, ref.Key)
			}
		}
	}
	for _, name := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"} {
		if e := env[name]; e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
			add("env %s must come from the ConfigMap, where an operator changes where the worker connects", name)
		}
	}
	for _, cm := range o.configMaps {
		out = append(out, nameProblems("ConfigMap", cm.ObjectMeta)...)
		for k := range cm.Data {
			if secretish(k) {
				add("ConfigMap %s holds %s, a credential: put it in the Secret", cm.Name, k)
			}
		}
	}

	// The status port: where the worker listens, what probes and scrapes
	// reach.
	var port int32
	addr := env[w.metricsAddrEnv].Value
	if host, p, err := net.SplitHostPort(addr); err != nil {
		add("env %s %q: %v", w.metricsAddrEnv, addr, err)
	} else {
		if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
			add("env %s %q listens on %s only: the kubelet probes and Prometheus scrapes the pod's IP, so listen on 0.0.0.0", w.metricsAddrEnv, addr, host)
		}
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			add("env %s %q: port %q: %v", w.metricsAddrEnv, addr, p, err)
		}
		port = int32(n)
		if _, ok := containerPort(*c, intstr.FromInt32(port)); !ok {
			add("env %s %q: the container declares no port %d", w.metricsAddrEnv, addr, port)
		}
	}
	for _, p := range c.Ports {
		if msg := validation.IsValidPortName(p.Name); p.Name != "" && len(msg) > 0 {
			add("container port name %q: %s", p.Name, strings.Join(msg, "; "))
		}
	}
	if !w.probesOnMetricsAddr {
		add("the worker no longer serves its probes on the metrics address (serveStatus(ctx, cfg.MetricsAddr, statusHandler(...)) in worker/): the probes need their own port here")
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"startupProbe", c.StartupProbe, w.healthPath},
		{"livenessProbe", c.LivenessProbe, w.healthPath},
		{"readinessProbe", c.ReadinessProbe, w.readyPath},
	} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			add("%s: want an httpGet on %s", pr.name, pr.path)
			continue
		}
		get := pr.probe.HTTPGet
		if get.Path != pr.path {
			add("%s path %q, but the worker serves %q", pr.name, get.Path, pr.path)
		}
		if p, ok := containerPort(*c, get.Port); !ok {
			add("%s port %s is not a port of the container", pr.name, get.Port.String())
		} else if p != port {
			add("%s port %s is %d, but the worker listens on %d (%s)", pr.name, get.Port.String(), p, port, w.metricsAddrEnv)
		}
	}
	if rp := c.ReadinessProbe; rp != nil && rp.TimeoutSeconds < 4 {
		// /readyz answers within 3 s (its checks' deadline), so a shorter
		// timeout turns a slow check into a failed probe without a reason.
		add("readinessProbe timeoutSeconds %d: /readyz may take 3 s; give it at least 4", rp.TimeoutSeconds)
	}
	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" {
		add("pod annotation prometheus.io/scrape = %q, want \"true\"", ann["prometheus.io/scrape"])
	}
	if ann["prometheus.io/port"] != strconv.Itoa(int(port)) {
		add("pod annotation prometheus.io/port = %q, but the worker listens on %d", ann["prometheus.io/port"], port)
	}
	if ann["prometheus.io/path"] != w.metricsPath {
		add("pod annotation prometheus.io/path = %q, but the worker serves metrics at %q", ann["prometheus.io/path"], w.metricsPath)
	}
	for _, svc := range o.services {
		out = append(out, nameProblems("Service", svc.ObjectMeta)...)
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			add("Service %s selector %v does not select the worker's pods %v", svc.Name, svc.Spec.Selector, podLabels)
		}
		reaches := false
		for _, sp := range svc.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			if p, ok := containerPort(*c, target); ok && p == port {
				reaches = true
			}
		}
		if !reaches {
			add("Service %s has no port reaching the worker's metrics port %d", svc.Name, port)
		}
	}

	// SIGTERM: the grace period outlasts the drain.
	stop, err := time.ParseDuration(env[w.stopTimeoutEnv].Value)
	if err != nil || stop < 0 {
		add("env %s %q: want a duration such as 60s (%v)", w.stopTimeoutEnv, env[w.stopTimeoutEnv].Value, err)
	}
	grace := time.Duration(-1)
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	if grace < stop+graceMargin {
		add("terminationGracePeriodSeconds %v is shorter than %s %v plus %v: the kubelet would SIGKILL a draining worker mid-call", grace, w.stopTimeoutEnv, stop, graceMargin)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		add("a preStop hook runs inside the grace period before SIGTERM and shortens the drain")
	}

	// Resources and privileges.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			add("container requests no %s", r)
		}
	}
	if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && lim.Cmp(c.Resources.Requests[corev1.ResourceMemory]) < 0 {
		add("memory limit %s is below the request %s", lim.String(), c.Resources.Requests.Memory().String())
	}
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	nonRoot, uid, gid := psc.RunAsNonRoot, psc.RunAsUser, psc.RunAsGroup
	if csc.RunAsNonRoot != nil {
		nonRoot = csc.RunAsNonRoot
	}
	if csc.RunAsUser != nil {
		uid = csc.RunAsUser
	}
	if csc.RunAsGroup != nil {
		gid = csc.RunAsGroup
	}
	if nonRoot == nil || !*nonRoot {
		add("runAsNonRoot is not true")
	}
	if uid == nil || *uid != img.uid || gid == nil || *gid != img.gid {
		add("runAsUser/runAsGroup %v/%v, want the Dockerfile's USER %d/%d (numeric, so the kubelet can check runAsNonRoot)", deref(uid), deref(gid), img.uid, img.gid)
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		add("allowPrivilegeEscalation is not false")
	}
	if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) != 0 {
		add("capabilities: want drop [ALL] and nothing added")
	}
	if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		add("readOnlyRootFilesystem is not true")
	}
	if sp := psc.SeccompProfile; sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		add("pod seccompProfile is not RuntimeDefault")
	}
	if a := pod.AutomountServiceAccountToken; a == nil || *a {
		add("automountServiceAccountToken is not false: the worker never calls the Kubernetes API")
	}
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// fixture is everything problems compares, read from the repository.
type fixture struct {
	objects objects
	secret  *corev1.Secret
	worker  workerFacts
	image   imageFacts
}

func load(t *testing.T) fixture {
	t.Helper()
	docs, err := render(".")
	if err != nil {
		t.Fatal(err)
	}
	o, err := decodeAll(docs)
	if err != nil {
		t.Fatalf("rendered manifests: %v", err)
	}
	secret, err := loadSecretExample("secret.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w, err := readWorkerFacts(filepath.Join(repoRoot, "worker"), filepath.Join(repoRoot, "cmd", "agentsaga", "main.go"))
	if err != nil {
		t.Fatalf("the worker's source: %v", err)
	}
	img, err := readImageFacts(filepath.Join(repoRoot, "Dockerfile"), filepath.Join(repoRoot, "docker-compose.yml"), composeWorker)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{o, secret, w, img}
}

// The manifests render, decode strictly and agree with the worker: probe
// paths and port, the grace period, the Secret's keys, the image.
func TestManifests(t *testing.T) {
	f := load(t)
	if n := len(f.objects.deployments) + len(f.objects.services) + len(f.objects.configMaps); n != 3 {
		t.Errorf("rendered %d objects, want the Deployment, the Service and the ConfigMap", n)
	}
	for _, p := range problems(f.objects, f.secret, f.worker, f.image) {
		t.Error(p)
	}
	// What the checks above compared with, so a reader sees it was real.
	t.Logf("worker: health %s, ready %s, metrics %s on $%s; stop timeout $%s; image %s %q %q as %d:%d",
		f.worker.healthPath, f.worker.readyPath, f.worker.metricsPath, f.worker.metricsAddrEnv,
		f.worker.stopTimeoutEnv, f.image.image, f.image.entrypoint, f.image.cmd, f.image.uid, f.image.gid)
}

// The facts come from the worker as it is; if these ever change, the
// manifests must change with them (TestManifests then fails), and so must
// this test, on purpose.
func TestWorkerFactsAreRead(t *testing.T) {
	f := load(t)
	w := f.worker
	got := []string{w.healthPath, w.readyPath, w.metricsPath, w.metricsAddrEnv, w.stopTimeoutEnv}
	want := []string{"/healthz", "/readyz", "/metrics", "AGENTSAGA_METRICS_ADDR", "AGENTSAGA_STOP_TIMEOUT"}
	if !slices.Equal(got, want) {
		t.Errorf("worker facts %q, want %q", got, want)
	}
	for _, name := range []string{"DATABASE_URL", "TEMPORAL_ADDRESS"} {
		if !w.getenv[name] {
			t.Errorf("worker/ reads no %s with os.Getenv", name)
		}
	}
	if !w.temporalEnv["TEMPORAL_API_KEY"] {
		t.Error("the CLI's help names no TEMPORAL_API_KEY")
	}
	if !w.probesOnMetricsAddr {
		t.Error("serveStatus(ctx, cfg.MetricsAddr, statusHandler(...)) not found in worker/")
	}
}

// problems must be able to fail: each way the manifests could drift from
// the worker, or break it, is reported, naming what is wrong.
func TestProblemsCatchDrift(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(f *fixture, d *appsv1.Deployment, c *corev1.Container)
		want   string
	}{
		{"worker renames its readiness path", func(f *fixture, _ *appsv1.Deployment, _ *corev1.Container) {
			f.worker.readyPath = "/ready"
		}, `readinessProbe path "/readyz", but the worker serves "/ready"`},
		{"worker renames its health path", func(f *fixture, _ *appsv1.Deployment, _ *corev1.Container) {
			f.worker.healthPath = "/livez"
		}, `livenessProbe path "/healthz", but the worker serves "/livez"`},
		{"worker reads another variable for its address", func(f *fixture, _ *appsv1.Deployment, _ *corev1.Container) {
			f.worker.metricsAddrEnv = "AGENTSAGA_STATUS_ADDR"
		}, "env AGENTSAGA_STATUS_ADDR is not set explicitly"},
		{"worker moves its probes off the metrics address", func(f *fixture, _ *appsv1.Deployment, _ *corev1.Container) {
			f.worker.probesOnMetricsAddr = false
		}, "no longer serves its probes on the metrics address"},
		{"listen port moves", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			setEnv(c, "AGENTSAGA_METRICS_ADDR", "0.0.0.0:9090")
		}, `"0.0.0.0:9090": the container declares no port 9090`},
		{"loopback only", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			setEnv(c, "AGENTSAGA_METRICS_ADDR", "127.0.0.1:9464")
		}, "listens on 127.0.0.1 only"},
		{"probe on another port", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			c.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(8080)
		}, "readinessProbe port 8080 is not a port of the container"},
		{"container port moves alone", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			c.Ports[0].ContainerPort = 8080
		}, "livenessProbe port http-status is 8080, but the worker listens on 9464"},
		{"no liveness probe", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			c.LivenessProbe = nil
		}, "livenessProbe: want an httpGet on /healthz"},
		{"scrape path", func(f *fixture, d *appsv1.Deployment, _ *corev1.Container) {
			f.worker.metricsPath = "/stats"
		}, `prometheus.io/path = "/metrics", but the worker serves metrics at "/stats"`},
		{"grace period of the default 30 s", func(_ *fixture, d *appsv1.Deployment, _ *corev1.Container) {
			d.Spec.Template.Spec.TerminationGracePeriodSeconds = new(int64(30))
		}, "terminationGracePeriodSeconds 30s is shorter than AGENTSAGA_STOP_TIMEOUT 1m0s plus 10s"},
		{"stop timeout raised alone", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			setEnv(c, "AGENTSAGA_STOP_TIMEOUT", "2m")
		}, "terminationGracePeriodSeconds 1m15s is shorter than AGENTSAGA_STOP_TIMEOUT 2m0s"},
		{"stop timeout left to the default", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "AGENTSAGA_STOP_TIMEOUT" })
		}, "env AGENTSAGA_STOP_TIMEOUT is not set explicitly"},
		{"secret key misspelt", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			envVar(c, "DATABASE_URL").ValueFrom.SecretKeyRef.Key = "DATABASE_URI"
		}, `secretKeyRef key "DATABASE_URI" is not a key of Secret "agentsaga-worker"`},
		{"secret renamed", func(f *fixture, _ *appsv1.Deployment, _ *corev1.Container) {
			f.secret.Name = "agentsaga"
		}, `secretKeyRef names Secret "agentsaga-worker", the example is "agentsaga"`},
		{"database URL written in", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			*envVar(c, "DATABASE_URL") = corev1.EnvVar{Name: "DATABASE_URL", Value: "postgres://u:p@db/agentsaga"}
		}, "env DATABASE_URL holds a credential"},
		{"a variable the worker does not read", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "AGENTSAGA_METRIC_ADDR", Value: ":9464"})
		}, "env AGENTSAGA_METRIC_ADDR: the worker does not read it"},
		{"namespace written in", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			*envVar(c, "TEMPORAL_NAMESPACE") = corev1.EnvVar{Name: "TEMPORAL_NAMESPACE", Value: "default"}
		}, "env TEMPORAL_NAMESPACE must come from the ConfigMap"},
		{"configmap key missing", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			envVar(c, "TEMPORAL_ADDRESS").ValueFrom.ConfigMapKeyRef.Key = "ADDRESS"
		}, "configMapKeyRef agentsaga-worker/ADDRESS is no key of a rendered ConfigMap"},
		{"another image", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			c.Image = "agentsaga/worker:latest"
		}, `container image "agentsaga/worker:latest", want "agentsaga:local"`},
		{"entrypoint replaced", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			c.Command = []string{"/bin/sh"}
		}, "replaces the Dockerfile's ENTRYPOINT"},
		{"root", func(_ *fixture, d *appsv1.Deployment, _ *corev1.Container) {
			d.Spec.Template.Spec.SecurityContext.RunAsUser = new(int64(0))
		}, "runAsUser/runAsGroup 0/65532, want the Dockerfile's USER 65532/65532"},
		{"image user changes", func(f *fixture, _ *appsv1.Deployment, _ *corev1.Container) {
			f.image.uid = 1000
		}, "want the Dockerfile's USER 1000/65532"},
		{"no memory request", func(_ *fixture, _ *appsv1.Deployment, c *corev1.Container) {
			delete(c.Resources.Requests, corev1.ResourceMemory)
		}, "container requests no memory"},
		{"service selects nothing", func(f *fixture, _ *appsv1.Deployment, _ *corev1.Container) {
			f.objects.services[0].Spec.Selector = map[string]string{"app": "worker"}
		}, "does not select the worker's pods"},
		{"rollout takes pods down first", func(_ *fixture, d *appsv1.Deployment, _ *corev1.Container) {
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = new(intstr.FromInt32(1))
		}, "maxUnavailable must be 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := load(t)
			d := f.objects.deployments[0]
			c := &d.Spec.Template.Spec.Containers[0]
			if before := problems(f.objects, f.secret, f.worker, f.image); len(before) != 0 {
				t.Fatalf("the manifests have problems before the change: %q", before)
			}
			tc.change(&f, d, c)
			got := strings.Join(problems(f.objects, f.secret, f.worker, f.image), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("want a problem containing %q; got:\n%s", tc.want, got)
			}
		})
	}
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	panic("no env " + name)
}

func setEnv(c *corev1.Container, name, value string) {
	*envVar(c, name) = corev1.EnvVar{Name: name, Value: value}
}

// Strict decoding rejects what kubectl would drop with a warning.
func TestDecodeStrictRejectsUnknownFields(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"misspelt probe": {`apiVersion: apps/v1
kind: Deployment
metadata: {name: w}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
        - name: worker
          image: agentsaga:local
          livenessprobe: {httpGet: {path: /healthz, port: 9464}}
`, `unknown field "spec.template.spec.containers[0].livenessprobe"`},
		"misplaced grace period": {`apiVersion: apps/v1
kind: Deployment
metadata: {name: w}
spec:
  terminationGracePeriodSeconds: 75
`, `unknown field "spec.terminationGracePeriodSeconds"`},
		"a number for a string": {`apiVersion: v1
kind: ConfigMap
metadata: {name: w}
data: {A: 1}
`, "cannot unmarshal number"},
		"bad quantity": {`apiVersion: apps/v1
kind: Deployment
metadata: {name: w}
spec:
  template:
    spec:
      containers:
        - name: worker
          resources: {requests: {memory: lots}}
`, "quantities must match the regular expression"},
		"duplicate key": {`apiVersion: v1
kind: ConfigMap
metadata: {name: w}
data: {A: x, A: y}
`, `"A" already set in map`},
		"unknown kind": {`apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: w}
`, "not a kind these tests check"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := decodeStrict([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The facts readers fail, naming what is missing, rather than return
// empty values that a check might compare equal to an empty field.
func TestFactReadersNameWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := filesys.MakeFsOnDisk().WriteFile(path, []byte(text)); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("health.go", "package worker\n\nconst HealthPath = \"/healthz\"\n")
	if _, err := readWorkerFacts(dir, write("main.go", "package main\n")); err == nil || !strings.Contains(err.Error(), "no string constant") {
		t.Errorf("worker without ReadyPath: err = %v", err)
	}
	dockerfile := write("Dockerfile", "FROM golang AS build\nUSER nonroot\nFROM scratch\nENTRYPOINT [\"/agentsaga\"]\n")
	compose := write("compose.yml", "services:\n  agentsaga-worker:\n    image: agentsaga:${TAG:-local}\n")
	if _, err := readImageFacts(dockerfile, compose, composeWorker); err == nil || !strings.Contains(err.Error(), "sets no USER") {
		t.Errorf("runtime stage without USER (the build stage's does not count): err = %v", err)
	}
	dockerfile = write("Dockerfile", "FROM scratch\nUSER nonroot:nonroot\nENTRYPOINT /agentsaga\n")
	if _, err := readImageFacts(dockerfile, compose, composeWorker); err == nil || !strings.Contains(err.Error(), "not in exec form") {
		t.Errorf("shell-form ENTRYPOINT: err = %v", err)
	}
	dockerfile = write("Dockerfile", "FROM scratch\nUSER 10001:nonroot\nENTRYPOINT [\"/agentsaga\"]\nCMD [\"worker\"]\n")
	img, err := readImageFacts(dockerfile, compose, composeWorker)
	if err != nil || img.image != "agentsaga:local" || img.uid != 10001 || img.gid != 65532 || !slices.Equal(img.cmd, []string{"worker"}) {
		t.Errorf("readImageFacts = %+v, %v", img, err)
	}
}
