package helm

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// The rendered chart, as the API server would store it: every object
// passes validation and admission (kubectl apply --dry-run=server), with
// default, custom and bundled-Postgres values.
func TestServerDryRun(t *testing.T) {
	c := kube(t)
	c.namespace(t, "whelm-dryrun", "pod-security.kubernetes.io/enforce=privileged")
	for name, args := range map[string][]string{
		"defaults":  nil,
		"with node": oneNode,
		"custom":    {"--values", "testdata/custom-values.yaml"},
		"postgres":  append([]string{"--set", "postgres.enabled=true"}, oneNode...),
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, "whelm-dryrun", args...)
			out, _, err := c.kubectl(r.yaml, "apply", "--dry-run=server", "--namespace", "whelm-dryrun", "-f", "-")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if n := strings.Count(out, "(server dry run)"); n != len(r.objects) {
				t.Errorf("%d of %d objects applied:\n%s", n, len(r.objects), out)
			}
		})
	}
}

// The namespace note in values.yaml and the NOTES: a namespace of
// PodSecurity level baseline refuses the node pods, a privileged one
// admits them, and the API pods pass even "restricted".
func TestPodSecurityAdmission(t *testing.T) {
	c := kube(t)
	r := render(t, "whelm-psa", oneNode...)
	nodePod := podOf(t, r.get(t, "DaemonSet", "warren-node-node-1"), "whelm-node")
	apiPod := podOf(t, r.get(t, "Deployment", "warren-api"), "whelm-api")
	for _, level := range []string{"baseline", "privileged", "restricted"} {
		ns := "whelm-psa-" + level
		c.namespace(t, ns, "pod-security.kubernetes.io/enforce="+level, "pod-security.kubernetes.io/warn="+level)
		// Pods need their ServiceAccount; no controller makes "default" here.
		if _, _, err := c.kubectl("", "create", "serviceaccount", "warren", "--namespace", ns); err != nil {
			t.Fatal(err)
		}
	}

	_, _, err := c.kubectl(nodePod, "create", "--dry-run=server", "--namespace", "whelm-psa-baseline", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "baseline`) ||
		!strings.Contains(err.Error(), "privileged") || !strings.Contains(err.Error(), "host namespaces") {
		t.Errorf("a node pod in a baseline namespace: %v, want refused for privileged and host namespaces", err)
	}
	if out, stderr, err := c.kubectl(nodePod, "create", "--dry-run=server", "--namespace", "whelm-psa-privileged", "-f", "-"); err != nil ||
		!strings.Contains(out, "created (server dry run)") || strings.Contains(stderr, "PodSecurity") {
		t.Errorf("a node pod in a privileged namespace: %v %s %s", err, out, stderr)
	}
	if out, stderr, err := c.kubectl(apiPod, "create", "--dry-run=server", "--namespace", "whelm-psa-restricted", "-f", "-"); err != nil ||
		!strings.Contains(out, "created (server dry run)") || strings.Contains(stderr, "PodSecurity") {
		t.Errorf("an API pod in a restricted namespace: %v %s %s", err, out, stderr)
	}
	// The DaemonSet itself is stored in a baseline namespace, with the
	// warning an operator sees at helm install.
	_, stderr, err := c.kubectl(r.yaml, "apply", "--dry-run=server", "--namespace", "whelm-psa-baseline", "-f", "-")
	if err != nil || !strings.Contains(stderr, `would violate PodSecurity "baseline`) {
		t.Errorf("the chart in a baseline namespace: %v, warnings %q: want the PodSecurity warning", err, stderr)
	}
}

// helm install, then upgrades: generated tokens stay the same, unchanged
// values leave the pod templates alone, a given admin token rolls the API
// but not the nodes.
func TestHelmInstallUpgrade(t *testing.T) {
	c := kube(t)
	const ns = "whelm-release"
	c.namespace(t, ns, "pod-security.kubernetes.io/enforce=privileged")
	db := "--set=database.url=postgres://warren:pw@db.example.test:5432/warren,node.nodes[0].name=node-1,node.nodes[0].advertise=10.0.0.11"
	out, err := c.helm("install", "warren", chartDir, "--namespace", ns, db)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The NOTES: the namespace's PodSecurity level, where the admin token
	// is, the node's token and TLS Secrets to make.
	for _, note := range []string{
		"kubectl label namespace " + ns + " pod-security.kubernetes.io/enforce=privileged",
		"kubectl -n " + ns + " get secret warren-tokens -o jsonpath='{.data.admin-token}'",
		"warren node token create node-1",
		"kubectl -n " + ns + " create secret generic warren-node-node-1 --from-file=token",
		"kubectl -n " + ns + " create secret tls warren-node-node-1-tls",
	} {
		if !strings.Contains(out, note) {
			t.Errorf("helm install does not say %q:\n%s", note, out)
		}
	}
	if strings.Contains(out, "create secret generic warren-database") {
		t.Errorf("helm install asks for a database Secret though database.url is set:\n%s", out)
	}
	// Without a database the NOTES say which Secret to make.
	out, err = c.helm("install", "other", chartDir, "--namespace", ns, "--dry-run")
	if err != nil || !strings.Contains(out, "kubectl -n "+ns+" create secret generic other-warren-database --from-literal=url=") {
		t.Errorf("helm install without a database: %v, NOTES do not name the Secret to make:\n%s", err, out)
	}
	tokens := c.secret(t, ns, "warren-tokens")
	if len(tokens["admin-token"]) != 40 || len(tokens["node-credential-key"]) != 48 {
		t.Fatalf("installed tokens %v", tokens)
	}
	if got := c.secret(t, ns, "warren-database")["url"]; got != "postgres://warren:pw@db.example.test:5432/warren" {
		t.Errorf("installed database URL %q", got)
	}
	c.wantGeneration(t, ns, "deployment/warren-api", 1)
	c.wantGeneration(t, ns, "daemonset/warren-node-node-1", 1)

	// The same values: nothing changes, no pod would restart.
	if out, err := c.helm("upgrade", "warren", chartDir, "--namespace", ns, db); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := c.secret(t, ns, "warren-tokens"); got["admin-token"] != tokens["admin-token"] || got["node-credential-key"] != tokens["node-credential-key"] {
		t.Errorf("upgrade changed the tokens: %v, was %v", got, tokens)
	}
	c.wantGeneration(t, ns, "deployment/warren-api", 1)
	c.wantGeneration(t, ns, "daemonset/warren-node-node-1", 1)

	// More replicas and a given admin token: the API rolls, the nodes do not.
	if out, err := c.helm("upgrade", "warren", chartDir, "--namespace", ns, db,
		"--set", "api.replicas=3,tokens.adminToken=given-admin-token-0123456789abcdef"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := c.secret(t, ns, "warren-tokens")
	if got["admin-token"] != "given-admin-token-0123456789abcdef" || got["node-credential-key"] != tokens["node-credential-key"] {
		t.Errorf("after giving an admin token: %v, node credential key was %q", got, tokens["node-credential-key"])
	}
	c.wantGeneration(t, ns, "deployment/warren-api", 2)
	c.wantGeneration(t, ns, "daemonset/warren-node-node-1", 1)
	if out, _, err := c.kubectl("", "get", "deployment/warren-api", "--namespace", ns, "-o", "jsonpath={.spec.replicas}"); err != nil || out != "3" {
		t.Errorf("API replicas %q (%v), want 3", out, err)
	}

	// The admin token given is dropped from the values again: the Secret
	// keeps it rather than generating a new one.
	if out, err := c.helm("upgrade", "warren", chartDir, "--namespace", ns, db); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := c.secret(t, ns, "warren-tokens"); got["admin-token"] != "given-admin-token-0123456789abcdef" || got["node-credential-key"] != tokens["node-credential-key"] {
		t.Errorf("after dropping the given admin token: %v", got)
	}
}

// The bundled Postgres: its generated password survives upgrades and helm
// uninstall (its volume does too), and the API's URL carries it.
func TestHelmBundledPostgres(t *testing.T) {
	c := kube(t)
	const ns = "whelm-postgres"
	c.namespace(t, ns, "pod-security.kubernetes.io/enforce=privileged")
	if out, err := c.helm("install", "warren", chartDir, "--namespace", ns, "--set", "postgres.enabled=true"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	password := c.secret(t, ns, "warren-postgres")["password"]
	url := c.secret(t, ns, "warren-database")["url"]
	if len(password) != 40 || !strings.Contains(url, ":"+password+"@warren-postgres."+ns+".svc:5432/") {
		t.Fatalf("password %q, URL %q", password, url)
	}
	if out, err := c.helm("upgrade", "warren", chartDir, "--namespace", ns, "--set", "postgres.enabled=true"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := c.secret(t, ns, "warren-postgres")["password"]; got != password {
		t.Errorf("upgrade changed the Postgres password")
	}
	if got := c.secret(t, ns, "warren-database")["url"]; got != url {
		t.Errorf("upgrade changed the database URL: %q, was %q", got, url)
	}
	if out, err := c.helm("uninstall", "warren", "--namespace", ns); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := c.secret(t, ns, "warren-postgres")["password"]; got != password {
		t.Errorf("after uninstall the Postgres password is %q, want it kept", got)
	}
	if _, _, err := c.kubectl("", "get", "secret", "warren-tokens", "--namespace", ns); err == nil {
		t.Errorf("the tokens Secret outlived helm uninstall")
	}
}

// secret is a Secret's data, decoded.
func (c *cluster) secret(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	out, _, err := c.kubectl("", "get", "secret", name, "--namespace", ns, "-o", "jsonpath={.data}")
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]string
	if err := json.Unmarshal([]byte(out), &data); err != nil {
		t.Fatalf("Secret %s data %q: %v", name, out, err)
	}
	for k, v := range data {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			t.Fatalf("Secret %s key %s: %v", name, k, err)
		}
		data[k] = string(b)
	}
	return data
}

// wantGeneration checks an object's metadata.generation: it grows with
// each change of its spec, which for a workload rolls its pods.
func (c *cluster) wantGeneration(t *testing.T, ns, object string, want int) {
	t.Helper()
	out, _, err := c.kubectl("", "get", object, "--namespace", ns, "-o", "jsonpath={.metadata.generation}")
	if err != nil {
		t.Fatal(err)
	}
	if out != strconv.Itoa(want) {
		t.Errorf("%s generation %s, want %d", object, out, want)
	}
}

// podOf is a Pod with the workload's pod template, as its controller
// would make it, in JSON.
func podOf(t *testing.T, workload object, name string) string {
	t.Helper()
	tmpl := workload.raw["spec"].(map[string]any)["template"].(map[string]any)
	meta, _ := tmpl["metadata"].(map[string]any)
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "labels": meta["labels"]},
		"spec":     tmpl["spec"],
	}
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kube-apiserver refuses privileged containers by default: the node
// DaemonSet needs --allow-privileged=true, as values.yaml and
// docs/deploy.md say; the API alone is admitted either way.
func TestAllowPrivilegedNeeded(t *testing.T) {
	c := kube(t)
	strict := c.strict(t)
	if _, _, err := c.kubectlAt(strict, "", "create", "namespace", "whelm-strict"); err != nil {
		t.Fatal(err)
	}
	r := render(t, "whelm-strict", oneNode...)
	_, _, err := c.kubectlAt(strict, r.yaml, "apply", "--dry-run=server", "--namespace", "whelm-strict", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), `The DaemonSet "warren-node-node-1" is invalid`) ||
		!strings.Contains(err.Error(), "privileged: Forbidden: disallowed by cluster policy") {
		t.Errorf("the chart on an API server without --allow-privileged: %v, want the DaemonSet refused", err)
	}
	r = render(t, "whelm-strict", append(oneNode, "--set", "node.enabled=false")...)
	if out, _, err := c.kubectlAt(strict, r.yaml, "apply", "--dry-run=server", "--namespace", "whelm-strict", "-f", "-"); err != nil {
		t.Errorf("the chart without nodes on an API server without --allow-privileged: %v\n%s", err, out)
	}
}
