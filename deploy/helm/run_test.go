package helm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// Ports of this test's warren api and warren node (the package's own).
const (
	runAPIPort   = 3835
	runRPCPort   = 3836
	runProxyPort = 3837
	// The API's token-free metrics listener, loopback by default (9464).
	runMetricsPort = 3838
)

// The command lines the chart renders run: the API container's and the
// node container's command, arguments and environment, resolved as the
// kubelet would (Secrets as variables and as mounted files, the downward
// API, $(VAR) in arguments), start the real warren binary on loopback over
// Postgres (the API as the pod's unprivileged user); both readiness probes
// answer (the node's over TLS), and the node registers with the API's
// Service URL with its own token, issued through the API and given in its
// Secret as the operator would, serving TLS with a certificate of the CA
// in the CA Secret. The node runs the fake driver (the only change to its
// flags, through node.extraArgs; the API's metrics listener moves to a
// port of this test's) and both listen on 127.0.0.1 for the rendered
// 0.0.0.0.
func TestRenderedCommandsRun(t *testing.T) {
	warren := tool(t, "WARREN_WARREN")
	out, err := exec.Command(warren, "node", "--help").CombinedOutput()
	require(t, err == nil && strings.Contains(string(out), "--advertise"), "WARREN_WARREN has no node role: "+string(out))
	dsn := storetest.PostgresSchema(t)
	// The node's data dir and the logs, in the package's work directory.
	dir, err := os.MkdirTemp(workDir, "run-")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "node-data")
	r := render(t, "whelm-run",
		"--set", "node.nodes[0].name=whelm-node-1,node.nodes[0].advertise=127.0.0.1",
		"--set", fmt.Sprintf("api.port=%d,node.rpcPort=%d,node.proxyPort=%d", runAPIPort, runRPCPort, runProxyPort),
		"--set", fmt.Sprintf("node.apiURL=http://127.0.0.1:%d", runAPIPort),
		"--set", "node.dataDir="+dataDir,
		"--set-string", "database.url="+dsn,
		"--set", "node.extraArgs={--driver,fake}",
		"--set", fmt.Sprintf("api.extraArgs={--metrics-listen,127.0.0.1:%d}", runMetricsPort))
	pod := podEnv{
		secrets: map[string]object{},
		fields:  map[string]string{"spec.nodeName": "whelm-node-1", "status.hostIP": "127.0.0.1"},
		files:   map[string]map[string][]byte{},
	}
	// The Secrets the operator makes: the CA's, and (below) the node's.
	ca, err := os.ReadFile(e2eserve.CAFile(t))
	if err != nil {
		t.Fatal(err)
	}
	pod.files["warren-ca"] = map[string][]byte{"ca.crt": ca}
	for _, o := range r.objects {
		if o.Kind == "Secret" {
			pod.secrets[o.Metadata.Name] = o
		}
	}
	adminToken := r.get(t, "Secret", "warren-tokens").secretValue(t, "admin-token")

	apiDeployment := r.get(t, "Deployment", "warren-api")
	api := apiDeployment.container(t, "api")
	// As the pod's user and group, not root.
	psc := apiDeployment.raw["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["securityContext"].(map[string]any)
	uid, gid := psc["runAsUser"].(int), psc["runAsGroup"].(int)
	if uid == 0 || gid == 0 {
		t.Fatalf("the API pod runs as %d:%d, want a user and group other than root", uid, gid)
	}
	pod.credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	startContainer(t, worldExecutable(t, warren), apiDeployment, api, pod, filepath.Join(dir, "api.log"))
	pod.credential = nil
	probe := api.ReadinessProbe.HTTPGet
	if got := waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d%s", runAPIPort, probe.Path), "", func(code int, _ []byte) bool { return code/100 == 2 }); got != http.StatusNoContent {
		t.Fatalf("API readiness probe GET %s: %d", probe.Path, got)
	}

	token := e2eserve.Admin{URL: fmt.Sprintf("http://127.0.0.1:%d", runAPIPort), Token: adminToken}.IssueNodeToken(t, "whelm-node-1")
	pod.files["warren-node-whelm-node-1"] = map[string][]byte{"token": []byte(token)}
	certFile, keyFile := e2eserve.IssueCert(t, filepath.Join(dir, "issued"), "127.0.0.1")
	crt, _ := os.ReadFile(certFile)
	key, _ := os.ReadFile(keyFile)
	pod.files["warren-node-whelm-node-1-tls"] = map[string][]byte{"tls.crt": crt, "tls.key": key}
	nodeDS := r.get(t, "DaemonSet", "warren-node-whelm-node-1")
	node := nodeDS.container(t, "node")
	startContainer(t, warren, nodeDS, node, pod, filepath.Join(dir, "node.log"))
	var nodes []struct {
		ID, Status, RPCAddress, ProxyAddress string
	}
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/admin/nodes", runAPIPort), adminToken, func(code int, body []byte) bool {
		return code == http.StatusOK && json.Unmarshal(body, &nodes) == nil && len(nodes) == 1 && nodes[0].Status == "ready"
	})
	probe = node.ReadinessProbe.HTTPGet
	if got := waitHTTP(t, fmt.Sprintf("%s://127.0.0.1:%d%s", strings.ToLower(probe.Scheme), runRPCPort, probe.Path), "", func(code int, _ []byte) bool { return code/100 == 2 }); got != http.StatusOK {
		t.Errorf("node readiness probe GET %s: %d", probe.Path, got)
	}
	n := nodes[0]
	if n.ID != "whelm-node-1" || n.RPCAddress != fmt.Sprintf("https://127.0.0.1:%d", runRPCPort) || n.ProxyAddress != fmt.Sprintf("127.0.0.1:%d", runProxyPort) {
		t.Errorf("registered node %+v, want whelm-node-1 at the host IP's RPC and proxy ports", n)
	}
}

// worldExecutable is a copy of the binary that any user can run, in a
// directory any user can reach (the checkout may be in root's home).
func worldExecutable(t *testing.T, path string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "whelm-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// podEnv is what the kubelet resolves a container's environment from.
type podEnv struct {
	secrets map[string]object
	fields  map[string]string
	// files are the Secrets the operator makes, by name: their keys'
	// contents, mounted where a pod's volumes say.
	files map[string]map[string][]byte
	// credential is the container's user, nil for root.
	credential *syscall.Credential
}

func (p podEnv) resolve(t *testing.T, c container) []string {
	t.Helper()
	var env []string
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			s, ok := p.secrets[e.ValueFrom.SecretKeyRef.Name]
			if !ok {
				t.Fatalf("%s reads Secret %s, which the chart did not render", e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
			v = s.secretValue(t, e.ValueFrom.SecretKeyRef.Key)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			var ok bool
			if v, ok = p.fields[e.ValueFrom.FieldRef.FieldPath]; !ok {
				t.Fatalf("%s reads field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

var kubeVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// mounts writes the Secret volumes of workload's container c (from the
// chart's own Secrets or pod.files) in a directory the container's user
// can read and returns their mount paths' stand-ins, as the kubelet
// mounts them.
func (p podEnv) mounts(t *testing.T, workload object, c container) map[string]string {
	t.Helper()
	dir, err := os.MkdirTemp("", "whelm-mounts-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		secret := workload.secretVolume(m.MountPath)
		if secret == "" {
			continue
		}
		data := p.files[secret]
		if o, ok := p.secrets[secret]; ok {
			data = map[string][]byte{}
			for k := range o.Data {
				data[k] = []byte(o.secretValue(t, k))
			}
		}
		if data == nil {
			t.Fatalf("%s mounts Secret %s, which neither the chart nor the operator made", c.Name, secret)
		}
		at := filepath.Join(dir, m.Name)
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		for k, v := range data {
			if err := os.WriteFile(filepath.Join(at, k), v, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out[m.MountPath] = at
	}
	return out
}

// startContainer runs the container's command as the kubelet would, on
// loopback, and stops it by PID when the test ends.
func startContainer(t *testing.T, warren string, workload object, c container, pod podEnv, logPath string) {
	t.Helper()
	if len(c.Command) != 1 || c.Command[0] != "warren" {
		t.Fatalf("%s command %v", c.Name, c.Command)
	}
	mounts := pod.mounts(t, workload, c)
	env := pod.resolve(t, c)
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var args []string
	for _, a := range c.Args {
		a = kubeVar.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := vars[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
		for path, at := range mounts {
			if rest, ok := strings.CutPrefix(a, path+"/"); ok {
				a = filepath.Join(at, rest)
			}
		}
		args = append(args, strings.Replace(a, "0.0.0.0:", "127.0.0.1:", 1))
	}
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(warren, args...)
	// Only the container's environment, as in a pod (PATH for the tools).
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Dir(logPath)}, env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: pod.credential}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("warren %s log:\n%s", c.Name, b)
		}
	})
}

// waitHTTP polls url until ok accepts the answer (a bound of two minutes,
// not a measure) and returns the last status code.
func waitHTTP(t *testing.T, url, adminToken string, ok func(int, []byte) bool) int {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: e2eserve.ClientTLS(t)}}
	code := 0
	var last string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if adminToken != "" {
			req.Header.Set("X-Admin-Token", adminToken)
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		code = resp.StatusCode
		if err == nil && ok(code, body) {
			return code
		}
		last = fmt.Sprintf("%d %s", code, body)
	}
	t.Fatalf("GET %s: %s", url, last)
	return code
}
