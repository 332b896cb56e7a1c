package helm

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestChartLint(t *testing.T) {
	for _, args := range [][]string{
		{"lint", "--strict", chartDir},
		{"lint", "--strict", chartDir, "--values", "testdata/custom-values.yaml"},
		{"lint", "--strict", chartDir, "--set", "postgres.enabled=true"},
	} {
		out, err := helm(t, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
			t.Fatalf("helm %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

// The default values: tokens generated, the database URL read from a
// Secret the operator makes, the fixed flags of both roles.
func TestTemplateDefaults(t *testing.T) {
	r := render(t, "warren")
	want := []string{"DaemonSet/warren-node", "Deployment/warren-api", "Secret/warren-tokens", "Service/warren-api", "ServiceAccount/warren"}
	if got := r.names(); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("objects %v, want %v", got, want)
	}

	sa := r.get(t, "ServiceAccount", "warren")
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount mounts its token (%v): Warren does not call the Kubernetes API", sa.AutomountServiceAccountToken)
	}
	tokens := r.get(t, "Secret", "warren-tokens")
	admin, node := tokens.secretValue(t, "admin-token"), tokens.secretValue(t, "node-token")
	token := regexp.MustCompile(`^[A-Za-z0-9]{40}$`)
	if !token.MatchString(admin) || !token.MatchString(node) || admin == node {
		t.Errorf("generated tokens %q and %q: want two different 40-character ones", admin, node)
	}

	api := r.get(t, "Deployment", "warren-api")
	if api.Spec.Replicas == nil || *api.Spec.Replicas != 2 {
		t.Errorf("API replicas %v, want 2", api.Spec.Replicas)
	}
	checkAPI(t, api, "warren:0.1.0", 3000, "warren-database/url")
	checkSelects(t, r.get(t, "Service", "warren-api"), api)
	if svc := r.get(t, "Service", "warren-api"); svc.Spec.Type != "ClusterIP" || len(svc.Spec.Ports) != 1 ||
		svc.Spec.Ports[0].Port != 3000 || fmt.Sprint(svc.Spec.Ports[0].TargetPort) != "http" {
		t.Errorf("API Service %s %+v, want ClusterIP 3000 -> http", svc.Spec.Type, svc.Spec.Ports)
	}

	ds := r.get(t, "DaemonSet", "warren-node")
	checkNode(t, ds, nodeWant{
		image: "warren:0.1.0", rpc: 3100, proxy: 3101, dataDir: "/var/lib/warren",
		apiURL: "http://warren-api.warren.svc:3000",
	})
	for _, o := range r.objects {
		if o.Kind == "StatefulSet" {
			t.Errorf("bundled Postgres rendered while postgres.enabled is false")
		}
	}
}

// Every value the chart documents moves what it should.
func TestTemplateCustomValues(t *testing.T) {
	r := render(t, "sandboxes", "--values", "testdata/custom-values.yaml")
	if got := r.get(t, "Secret", "warren-tokens"); got.secretValue(t, "admin-token") != "admin-secret-0f4a9b2c-0123456789abcd" ||
		got.secretValue(t, "node-token") != "node-secret-5e6d7c8b" {
		t.Errorf("tokens given in the values are not the Secret's: %v", got.Data)
	}
	db := r.get(t, "Secret", "warren-database")
	if got := db.secretValue(t, "url"); got != "postgres://warren:db-secret-7c1f@db.example.test:5432/warren?sslmode=require" {
		t.Errorf("database URL %q", got)
	}
	// The credentials reach the pods through Secrets only, never in plain text.
	for _, secret := range []string{"admin-secret-0f4a9b2c-0123456789abcd", "node-secret-5e6d7c8b", "db-secret-7c1f"} {
		if strings.Contains(r.yaml, secret) {
			t.Errorf("%q appears in plain text in the rendered objects", secret)
		}
	}

	api := r.get(t, "Deployment", "warren-api")
	if api.Spec.Replicas == nil || *api.Spec.Replicas != 3 {
		t.Errorf("API replicas %v, want 3", api.Spec.Replicas)
	}
	c := checkAPI(t, api, "registry.example.test/warren:1.2.3", 3080, "warren-database/url", "--domain", "sandbox.example.test")
	if c.env("WARREN_LOG_HINT") != "value custom" {
		t.Errorf("api.extraEnv not applied: %+v", c.Env)
	}
	if fmt.Sprint(c.Resources) != "map[limits:map[memory:2Gi] requests:map[cpu:500m memory:512Mi]]" {
		t.Errorf("API resources %v", c.Resources)
	}
	if got := fmt.Sprint(api.raw["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["imagePullSecrets"]); got != "[map[name:pull-secret]]" {
		t.Errorf("imagePullSecrets %s", got)
	}
	svc := r.get(t, "Service", "warren-api")
	if svc.Spec.Type != "NodePort" || svc.Spec.Ports[0].NodePort != 30300 || svc.Spec.Ports[0].Port != 3000 {
		t.Errorf("API Service %s %+v, want NodePort 30300 port 3000", svc.Spec.Type, svc.Spec.Ports)
	}

	ds := r.get(t, "DaemonSet", "warren-node")
	nc := checkNode(t, ds, nodeWant{
		image: "registry.example.test/warren:1.2.3", rpc: 3200, proxy: 3201, dataDir: "/srv/warren",
		apiURL: "http://api.example.test:3000", extra: []string{"--cgroup-root", "warren-k8s"},
	})
	if fmt.Sprint(nc.Resources) != "map[limits:map[] requests:map[cpu:1 memory:1Gi]]" {
		t.Errorf("node resources %v", nc.Resources)
	}
	if ds.Spec.Template.Spec.NodeSelector["warren.dev/node"] != "true" {
		t.Errorf("node nodeSelector %v", ds.Spec.Template.Spec.NodeSelector)
	}
	if !strings.Contains(fmt.Sprint(ds.raw["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["tolerations"]), "warren.dev/sandboxes") {
		t.Errorf("node tolerations not applied")
	}
}

// postgres.enabled: a StatefulSet, and a database URL that carries the
// password the Postgres container is given.
func TestTemplateBundledPostgres(t *testing.T) {
	r := render(t, "warren", "--set", "postgres.enabled=true")
	sts := r.get(t, "StatefulSet", "warren-postgres")
	pg := sts.container(t, "postgres")
	if pg.env("POSTGRES_PASSWORD") != "secret warren-postgres/password" || pg.Image != "postgres:16" {
		t.Errorf("postgres container %+v", pg)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || pg.ReadinessProbe == nil || pg.ReadinessProbe.Exec == nil {
		t.Errorf("postgres needs a volume claim and a readiness probe: %+v", sts.Spec)
	}
	checkSelects(t, r.get(t, "Service", "warren-postgres"), sts)
	pgSecret := r.get(t, "Secret", "warren-postgres")
	if pgSecret.Metadata.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the Postgres password is not kept across uninstall: %v", pgSecret.Metadata.Annotations)
	}
	password := pgSecret.secretValue(t, "password")
	url := r.get(t, "Secret", "warren-database").secretValue(t, "url")
	if want := "postgres://warren:" + password + "@warren-postgres.warren.svc:5432/warren?sslmode=disable"; url != want || len(password) != 40 {
		t.Errorf("database URL %q, want %q", url, want)
	}
	checkAPI(t, r.get(t, "Deployment", "warren-api"), "warren:0.1.0", 3000, "warren-database/url")
}

// Other ways to give the Secrets, and what the chart refuses.
func TestTemplateExistingSecretsAndErrors(t *testing.T) {
	r := render(t, "warren", "--set", "tokens.existingSecret=my-tokens,database.existingSecret=my-db,database.existingSecretKey=dsn,node.enabled=false")
	if r.has("Secret", "warren-tokens") || r.has("Secret", "warren-database") || r.has("DaemonSet", "warren-node") {
		t.Errorf("objects %v: want no chart Secrets and no DaemonSet", r.names())
	}
	c := r.get(t, "Deployment", "warren-api").container(t, "api")
	if c.env("WARREN_DATABASE_URL") != "secret my-db/dsn" || c.env("WARREN_ADMIN_TOKEN") != "secret my-tokens/admin-token" ||
		c.env("WARREN_NODE_TOKEN") != "secret my-tokens/node-token" {
		t.Errorf("API env %+v", c.Env)
	}

	out, err := helm(t, "template", "warren", chartDir, "--set", "serviceAccount.create=false")
	if err == nil || !strings.Contains(err.Error(), "serviceAccount.name is needed when serviceAccount.create is false") {
		t.Errorf("serviceAccount.create=false without a name: %v\n%s", err, out)
	}
}

// checkAPI checks the API container: the fixed flags then extra, the
// Secrets behind its variables, its port and probes, and that it runs
// unprivileged. It returns the container.
func checkAPI(t *testing.T, api object, image string, port int, dbSecret string, extra ...string) container {
	t.Helper()
	c := api.container(t, "api")
	wantArgs := append([]string{"api", "--listen", fmt.Sprintf("0.0.0.0:%d", port)}, extra...)
	if c.Image != image || !slices.Equal(c.Command, []string{"warren"}) || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("API runs %s %v %v, want %s warren %v", c.Image, c.Command, c.Args, image, wantArgs)
	}
	for name, want := range map[string]string{
		"WARREN_DATABASE_URL": "secret " + dbSecret,
		"WARREN_ADMIN_TOKEN":  "secret warren-tokens/admin-token",
		"WARREN_NODE_TOKEN":   "secret warren-tokens/node-token",
	} {
		if got := c.env(name); got != want {
			t.Errorf("API %s from %q, want %q", name, got, want)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != port {
		t.Errorf("API ports %+v, want http %d", c.Ports, port)
	}
	for name, p := range map[string]*probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || fmt.Sprint(p.HTTPGet.Port) != "http" {
			t.Errorf("API %s probe %+v, want GET /health on http", name, p)
		}
	}
	if c.Resources["requests"] == nil {
		t.Errorf("API has no resource requests")
	}
	sc := c.SecurityContext
	if sc["privileged"] == true || sc["allowPrivilegeEscalation"] != false || sc["readOnlyRootFilesystem"] != true {
		t.Errorf("API security context %v", sc)
	}
	if ps := api.Spec.Template.Spec; ps.HostNetwork || ps.HostPID || ps.ServiceAccountName != "warren" {
		t.Errorf("API pod spec %+v", ps)
	}
	return c
}

type nodeWant struct {
	image, dataDir, apiURL string
	rpc, proxy             int
	extra                  []string
}

// checkNode checks the node DaemonSet: privileged in the host's network
// and PID namespaces, the host directories with their propagation, the
// fixed flags, the downward API variables and the token.
func checkNode(t *testing.T, ds object, want nodeWant) container {
	t.Helper()
	ps := ds.Spec.Template.Spec
	if !ps.HostNetwork || !ps.HostPID || ps.DNSPolicy != "ClusterFirstWithHostNet" {
		t.Errorf("node pod hostNetwork=%v hostPID=%v dnsPolicy=%q, want both and ClusterFirstWithHostNet", ps.HostNetwork, ps.HostPID, ps.DNSPolicy)
	}
	c := ds.container(t, "node")
	if c.SecurityContext["privileged"] != true {
		t.Errorf("node container not privileged: %v", c.SecurityContext)
	}
	wantArgs := append([]string{"node",
		"--rpc-listen", fmt.Sprintf("0.0.0.0:%d", want.rpc), "--proxy-listen", fmt.Sprintf("0.0.0.0:%d", want.proxy),
		"--node-id", "$(WARREN_NODE_ID)", "--advertise", "$(WARREN_ADVERTISE)",
		"--api-url", want.apiURL, "--data-dir", want.dataDir}, want.extra...)
	if c.Image != want.image || !slices.Equal(c.Command, []string{"warren"}) || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("node runs %s %v %v, want %s warren %v", c.Image, c.Command, c.Args, want.image, wantArgs)
	}
	for name, w := range map[string]string{
		"WARREN_NODE_ID":    "field spec.nodeName",
		"WARREN_ADVERTISE":  "field status.hostIP",
		"WARREN_NODE_TOKEN": "secret warren-tokens/node-token",
	} {
		if got := c.env(name); got != w {
			t.Errorf("node %s from %q, want %q", name, got, w)
		}
	}
	if c.env("WARREN_DATABASE_URL") != "" || c.env("WARREN_ADMIN_TOKEN") != "" {
		t.Errorf("the node gets the database URL or the admin token: %+v", c.Env)
	}
	for path, w := range map[string]string{
		"/sys/fs/cgroup": "hostPath /sys/fs/cgroup (Directory), propagation None",
		"/run/netns":     "hostPath /run/netns (DirectoryOrCreate), propagation Bidirectional",
		"/run/warren":    "hostPath /run/warren (DirectoryOrCreate), propagation Bidirectional",
		want.dataDir:     "hostPath " + want.dataDir + " (DirectoryOrCreate), propagation Bidirectional",
		"/dev":           "hostPath /dev (Directory), propagation None",
	} {
		if got := ds.mount(path); got != w {
			t.Errorf("node mount %s: %q, want %q", path, got, w)
		}
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["rpc"] != want.rpc || ports["proxy"] != want.proxy {
		t.Errorf("node ports %v", c.Ports)
	}
	for name, p := range map[string]*probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || fmt.Sprint(p.HTTPGet.Port) != "rpc" {
			t.Errorf("node %s probe %+v, want GET /healthz on rpc", name, p)
		}
	}
	if c.Resources["requests"] == nil {
		t.Errorf("node has no resource requests")
	}
	return c
}

// checkSelects checks that the Service selects the workload's pods and
// that the workload's selector matches its own pods.
func checkSelects(t *testing.T, svc, workload object) {
	t.Helper()
	podLabels := workload.Spec.Template.Metadata.Labels
	match, _ := workload.Spec.Selector["matchLabels"].(map[string]any)
	if len(match) == 0 || len(svc.Spec.Selector) == 0 {
		t.Fatalf("empty selector: Service %v, %s %v", svc.Spec.Selector, workload.Kind, match)
	}
	for _, sel := range []map[string]any{svc.Spec.Selector, match} {
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("selector %s=%v does not match the pod labels %v", k, v, podLabels)
			}
		}
	}
}
