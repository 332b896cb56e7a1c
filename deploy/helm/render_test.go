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

// oneNode is the values of one node, node-1 at 10.0.0.11.
var oneNode = []string{"--set", "node.nodes[0].name=node-1,node.nodes[0].advertise=10.0.0.11"}

// The default values: tokens generated, the database URL read from a
// Secret the operator makes, the fixed flags of both roles; no node until
// one is listed, then a DaemonSet of its own.
func TestTemplateDefaults(t *testing.T) {
	if r := render(t, "warren"); r.has("DaemonSet", "warren-node") || len(r.names()) != 4 {
		t.Fatalf("objects %v without nodes listed, want the API's alone", r.names())
	}
	r := render(t, "warren", oneNode...)
	want := []string{"DaemonSet/warren-node-node-1", "Deployment/warren-api", "Secret/warren-tokens", "Service/warren-api", "ServiceAccount/warren"}
	if got := r.names(); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("objects %v, want %v", got, want)
	}

	sa := r.get(t, "ServiceAccount", "warren")
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount mounts its token (%v): Warren does not call the Kubernetes API", sa.AutomountServiceAccountToken)
	}
	tokens := r.get(t, "Secret", "warren-tokens")
	admin, key := tokens.secretValue(t, "admin-token"), tokens.secretValue(t, "node-credential-key")
	if !regexp.MustCompile(`^[A-Za-z0-9]{40}$`).MatchString(admin) || !regexp.MustCompile(`^[A-Za-z0-9]{48}$`).MatchString(key) {
		t.Errorf("generated admin token %q and node credential key %q: want 40 and 48 characters", admin, key)
	}
	if _, ok := tokens.Data["node-token"]; ok {
		t.Error("the chart still makes a node token shared by every node")
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

	ds := r.get(t, "DaemonSet", "warren-node-node-1")
	checkNode(t, ds, nodeWant{
		id: "node-1", advertise: "10.0.0.11", hostname: "node-1", tokenSecret: "warren-node-node-1", tlsSecret: "warren-node-node-1-tls", caSecret: "warren-ca",
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
		got.secretValue(t, "node-credential-key") != "node-credential-key-5e6d7c8b9a0b1c2d3e4f" {
		t.Errorf("tokens given in the values are not the Secret's: %v", got.Data)
	}
	db := r.get(t, "Secret", "warren-database")
	if got := db.secretValue(t, "url"); got != "postgres://warren:db-secret-7c1f@db.example.test:5432/warren?sslmode=require" {
		t.Errorf("database URL %q", got)
	}
	// The credentials reach the pods through Secrets only, never in plain text.
	for _, secret := range []string{"admin-secret-0f4a9b2c-0123456789abcd", "node-credential-key-5e6d7c8b9a0b1c2d3e4f", "db-secret-7c1f"} {
		if strings.Contains(r.yaml, secret) {
			t.Errorf("%q appears in plain text in the rendered objects", secret)
		}
	}

	api := r.get(t, "Deployment", "warren-api")
	if api.Spec.Replicas == nil || *api.Spec.Replicas != 3 {
		t.Errorf("API replicas %v, want 3", api.Spec.Replicas)
	}
	c := checkAPI(t, api, "registry.example.test/warren:1.2.3", 3080, "warren-database/url", "--domain", "sandbox.example.test")
	if api.secretVolume("/etc/warren/ca") != "my-ca" {
		t.Errorf("API CA from %q, want tls.caSecret my-ca", api.secretVolume("/etc/warren/ca"))
	}
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

	if !r.has("DaemonSet", "warren-node-sbx-b") || r.has("DaemonSet", "warren-node") {
		t.Errorf("objects %v: want a DaemonSet per listed node", r.names())
	}
	checkNode(t, r.get(t, "DaemonSet", "warren-node-sbx-b"), nodeWant{
		id: "sbx-b", advertise: "sbx-b.nodes.example.test", hostname: "ip-10-0-0-12", tokenSecret: "b-token", tlsSecret: "b-tls", caSecret: "my-ca",
		image: "registry.example.test/warren:1.2.3", rpc: 3200, proxy: 3201, dataDir: "/srv/warren",
		apiURL: "http://api.example.test:3000", extra: []string{"--cgroup-root", "warren-k8s"},
	})
	ds := r.get(t, "DaemonSet", "warren-node-sbx-a")
	nc := checkNode(t, ds, nodeWant{
		id: "sbx-a", advertise: "10.0.0.11", hostname: "sbx-a", tokenSecret: "warren-node-sbx-a", tlsSecret: "warren-node-sbx-a-tls", caSecret: "my-ca",
		image: "registry.example.test/warren:1.2.3", rpc: 3200, proxy: 3201, dataDir: "/srv/warren",
		apiURL: "http://api.example.test:3000", extra: []string{"--cgroup-root", "warren-k8s"},
	})
	if fmt.Sprint(nc.Resources) != "map[limits:map[] requests:map[cpu:1 memory:1Gi]]" {
		t.Errorf("node resources %v", nc.Resources)
	}
	if ds.Spec.Template.Spec.NodeSelector["warren.dev/node"] != "true" || ds.Spec.Template.Spec.NodeSelector["kubernetes.io/hostname"] != "sbx-a" {
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
	r := render(t, "warren", append(oneNode, "--set", "tokens.existingSecret=my-tokens,database.existingSecret=my-db,database.existingSecretKey=dsn,node.enabled=false")...)
	if r.has("Secret", "warren-tokens") || r.has("Secret", "warren-database") || r.has("DaemonSet", "warren-node-node-1") {
		t.Errorf("objects %v: want no chart Secrets and no DaemonSet", r.names())
	}
	c := r.get(t, "Deployment", "warren-api").container(t, "api")
	if c.env("WARREN_DATABASE_URL") != "secret my-db/dsn" || c.env("WARREN_ADMIN_TOKEN") != "secret my-tokens/admin-token" ||
		c.env("WARREN_NODE_CREDENTIAL_KEY") != "secret my-tokens/node-credential-key" {
		t.Errorf("API env %+v", c.Env)
	}
	for name, set := range map[string]string{
		"node.nodes[].advertise": "node.nodes[0].name=node-1",
		"node.nodes[].name":      "node.nodes[0].advertise=10.0.0.11",
		"lowercase letters":      "node.nodes[0].name=Node_1,node.nodes[0].advertise=10.0.0.11",
	} {
		if out, err := helm(t, "template", "warren", chartDir, "--set", set); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("--set %s: %v, want a refusal naming %s\n%s", set, err, name, out)
		}
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
	wantArgs := append([]string{"api", "--listen", fmt.Sprintf("0.0.0.0:%d", port), "--node-ca", "/etc/warren/ca/ca.crt"}, extra...)
	if c.Image != image || !slices.Equal(c.Command, []string{"warren"}) || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("API runs %s %v %v, want %s warren %v", c.Image, c.Command, c.Args, image, wantArgs)
	}
	for name, want := range map[string]string{
		"WARREN_DATABASE_URL":        "secret " + dbSecret,
		"WARREN_ADMIN_TOKEN":         "secret warren-tokens/admin-token",
		"WARREN_NODE_CREDENTIAL_KEY": "secret warren-tokens/node-credential-key",
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
	id, advertise, hostname          string
	tokenSecret, tlsSecret, caSecret string
	image, dataDir, apiURL           string
	rpc, proxy                       int
	extra                            []string
}

// checkNode checks a node's DaemonSet: privileged in the host's network
// and PID namespaces, pinned to its machine, the host directories with
// their propagation, the fixed flags, and its own token, certificate and
// the CA from Secrets (read-only), nothing else of the cluster's.
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
		"--node-id", want.id, "--advertise", want.advertise,
		"--api-url", want.apiURL, "--data-dir", want.dataDir,
		"--node-token-file", "/etc/warren/token/token", "--tls-cert", "/etc/warren/tls/tls.crt", "--tls-key", "/etc/warren/tls/tls.key",
		"--node-ca", "/etc/warren/ca/ca.crt"}, want.extra...)
	if c.Image != want.image || !slices.Equal(c.Command, []string{"warren"}) || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("node runs %s %v %v, want %s warren %v", c.Image, c.Command, c.Args, want.image, wantArgs)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("the node reads %s from Secret %s: want its own Secrets' files alone", e.Name, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	if got := ps.NodeSelector["kubernetes.io/hostname"]; got != want.hostname {
		t.Errorf("node pinned to %q, want %q", got, want.hostname)
	}
	for path, w := range map[string]string{"/etc/warren/token": want.tokenSecret, "/etc/warren/tls": want.tlsSecret, "/etc/warren/ca": want.caSecret} {
		if got := ds.secretVolume(path); got != w {
			t.Errorf("node %s from Secret %q, want %q", path, got, w)
		}
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
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || fmt.Sprint(p.HTTPGet.Port) != "rpc" || p.HTTPGet.Scheme != "HTTPS" {
			t.Errorf("node %s probe %+v, want GET /healthz on rpc over HTTPS", name, p)
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

// With cert-manager: a Certificate per node for its advertise address (an
// IP or a DNS name), one for the API with api.tls.enabled, each into the
// Secret its pods mount; the API serves TLS and the nodes reach it over
// https, checked against the CA.
func TestTemplateCertManager(t *testing.T) {
	r := render(t, "warren", "--set", "tls.certManager.issuerRef.name=warren-ca,tls.certManager.issuerRef.kind=ClusterIssuer,api.tls.enabled=true",
		"--set", "node.nodes[0].name=node-1,node.nodes[0].advertise=10.0.0.11,node.nodes[1].name=node-2,node.nodes[1].advertise=node-2.example.test")
	for name, want := range map[string]string{
		"warren-node-node-1": "secret warren-node-node-1-tls ip [10.0.0.11] dns []",
		"warren-node-node-2": "secret warren-node-node-2-tls ip [] dns [node-2.example.test]",
		"warren-api":         "secret warren-api-tls ip [] dns [warren-api warren-api.warren.svc warren-api.warren.svc.cluster.local]",
	} {
		spec := r.get(t, "Certificate", name).raw["spec"].(map[string]any)
		got := fmt.Sprintf("secret %v ip %v dns %v", spec["secretName"], orEmpty(spec["ipAddresses"]), orEmpty(spec["dnsNames"]))
		if got != want {
			t.Errorf("Certificate %s: %s, want %s", name, got, want)
		}
		if fmt.Sprint(spec["issuerRef"]) != "map[kind:ClusterIssuer name:warren-ca]" {
			t.Errorf("Certificate %s issuer %v", name, spec["issuerRef"])
		}
	}
	api := r.get(t, "Deployment", "warren-api")
	c := checkAPI(t, api, "warren:0.1.0", 3000, "warren-database/url", "--tls-cert", "/etc/warren/tls/tls.crt", "--tls-key", "/etc/warren/tls/tls.key")
	if c.ReadinessProbe.HTTPGet.Scheme != "HTTPS" || api.secretVolume("/etc/warren/tls") != "warren-api-tls" {
		t.Errorf("API over TLS: probe %+v, TLS from %q", c.ReadinessProbe.HTTPGet, api.secretVolume("/etc/warren/tls"))
	}
	n := r.get(t, "DaemonSet", "warren-node-node-1").container(t, "node")
	if !slices.Contains(c.Args, "--tls-cert") || !strings.Contains(strings.Join(n.Args, " "), "--api-url https://warren-api.warren.svc:3000") ||
		!strings.Contains(strings.Join(n.Args, " "), "--api-ca /etc/warren/ca/ca.crt") {
		t.Errorf("node args %v: want the API over https, checked against the CA", n.Args)
	}
}

func orEmpty(v any) any {
	if v == nil {
		return []any{}
	}
	return v
}
