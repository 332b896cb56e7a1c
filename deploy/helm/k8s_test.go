package helm

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The host names of this package's cluster: loopback ports that no other
// test uses, and work directories named whelm-* under the repository's var/.
const (
	apiserverPort = "36443"
	// The second API server's, without --allow-privileged.
	strictAPIServerPort = "3830"
	etcdPort            = "23790"
	etcdPeerPort        = "23800"
	chartDir            = "warren"
)

// workDir holds helm's and kubectl's homes and the cluster's files; TestMain
// makes it and removes it.
var workDir string

func TestMain(m *testing.M) {
	code, err := runMain(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func runMain(m *testing.M) (int, error) {
	varDir := filepath.Join("..", "..", "var")
	if err := os.MkdirAll(varDir, 0o755); err != nil {
		return 1, fmt.Errorf("make %s: %w", varDir, err)
	}
	dir, err := os.MkdirTemp(varDir, "whelm-")
	if err != nil {
		return 1, fmt.Errorf("make the work directory: %w", err)
	}
	if workDir, err = filepath.Abs(dir); err != nil {
		return 1, err
	}
	code := m.Run()
	if theCluster != nil {
		theCluster.stop()
	}
	if err := os.RemoveAll(workDir); err != nil {
		return code, fmt.Errorf("remove %s: %w", workDir, err)
	}
	return code, nil
}

// require skips the test when a prerequisite is missing, and fails it
// under CI=true, where every tool must be there.
func require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("prerequisite missing under CI: %s", reason)
	}
	t.Skipf("skipping: %s", reason)
}

// tool is the executable that the variable env names.
func tool(t testing.TB, env string) string {
	t.Helper()
	path := os.Getenv(env)
	require(t, path != "", env+` is not set: eval "$(scripts/k8s-tools.sh)"`)
	st, err := os.Stat(path)
	require(t, err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0, fmt.Sprintf("%s=%s is no executable (%v)", env, path, err))
	return path
}

// run runs a tool with its home in the work directory and returns its
// standard output and error.
func run(stdin string, env []string, name string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	home := filepath.Join(workDir, "home")
	cmd.Env = append(os.Environ(), "HOME="+home,
		"HELM_CACHE_HOME="+filepath.Join(home, "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "helm-config"),
		"HELM_DATA_HOME="+filepath.Join(home, "helm-data"))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String(), err
}

// helm runs helm without a cluster.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	out, _, err := run("", nil, tool(t, "WARREN_HELM"), args...)
	return out, err
}

// cluster is a kube-apiserver over an etcd, both on loopback, with a token
// of the system:masters group. No controller manager, scheduler or kubelet:
// objects are stored, no pod runs.
type cluster struct {
	dir          string
	kubeconfig   string
	procs        []*proc // in the order of starting
	kubectlBin   string
	helmBin      string
	apiserverBin string
	token        string // of the system:masters group, in the file tokens
	tokens       string
	saKey        string

	// A second API server that refuses privileged pods, started by strict.
	strictOnce       sync.Once
	strictKubeconfig string
	strictErr        error
}

var (
	clusterOnce sync.Once
	theCluster  *cluster
	clusterErr  error
)

// kube starts the package's cluster at its first call; TestMain stops it.
func kube(t *testing.T) *cluster {
	t.Helper()
	apiserver := tool(t, "WARREN_KUBE_APISERVER")
	etcd := tool(t, "WARREN_ETCD")
	kubectl := tool(t, "WARREN_KUBECTL")
	helmBin := tool(t, "WARREN_HELM")
	clusterOnce.Do(func() {
		theCluster = &cluster{kubectlBin: kubectl, helmBin: helmBin, apiserverBin: apiserver}
		clusterErr = theCluster.start(etcd)
	})
	if clusterErr != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", clusterErr)
	}
	return theCluster
}

func (c *cluster) start(etcd string) error {
	for _, port := range []string{apiserverPort, strictAPIServerPort, etcdPort, etcdPeerPort} {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			return fmt.Errorf("port %s, this test's own, is taken: %w", port, err)
		}
		_ = l.Close()
	}
	c.dir = filepath.Join(workDir, "cluster")
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + etcdPort
	peerURL := "http://127.0.0.1:" + etcdPeerPort
	var err error
	if err = c.spawn("etcd", etcd, "--name", "whelm", "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "whelm="+peerURL); err != nil {
		return err
	}
	if err := c.waitFor("etcd", etcdURL+"/health", nil, ""); err != nil {
		return err
	}

	if c.token, err = randomHex(20); err != nil {
		return err
	}
	c.tokens = filepath.Join(c.dir, "tokens.csv")
	if err := os.WriteFile(c.tokens, []byte(c.token+`,whelm-admin,whelm-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	c.saKey = filepath.Join(c.dir, "sa.key")
	if err := writeRSAKey(c.saKey); err != nil {
		return err
	}
	c.kubeconfig, err = c.startAPIServer("kube-apiserver", apiserverPort, "/registry",
		// The node DaemonSet is privileged.
		"--allow-privileged=true")
	return err
}

// startAPIServer starts a kube-apiserver over the cluster's etcd, keeping
// its objects under prefix, and returns the path of a kubeconfig for it.
func (c *cluster) startAPIServer(name, port, prefix string, extra ...string) (string, error) {
	certDir := filepath.Join(c.dir, name+"-certs")
	args := append([]string{
		"--etcd-servers", "http://127.0.0.1:" + etcdPort, "--etcd-prefix", prefix,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", port,
		"--cert-dir", certDir,
		"--token-auth-file", c.tokens, "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", c.saKey, "--service-account-signing-key-file", c.saKey,
		// Only a setting: no service is reached here.
		"--service-cluster-ip-range", "10.96.0.0/16",
		// It would refuse the loopback address as the kubernetes Service's endpoint.
		"--endpoint-reconciler-type", "none",
		"--profiling=false"}, extra...)
	if err := c.spawn(name, c.apiserverBin, args...); err != nil {
		return "", err
	}
	url := "https://127.0.0.1:" + port
	// Loopback, and the certificate the clients check below is the one the
	// server writes as it starts: the readiness poll does not check it.
	if err := c.waitFor(name, url+"/readyz", &tls.Config{InsecureSkipVerify: true}, c.token); err != nil {
		return "", err
	}
	// The server made a self-signed certificate; the clients check it.
	ca := filepath.Join(certDir, "apiserver.crt")
	if _, err := os.Stat(ca); err != nil {
		return "", fmt.Errorf("%s's certificate: %w", name, err)
	}
	kubeconfig := filepath.Join(c.dir, name+".kubeconfig")
	return kubeconfig, os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: whelm
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: whelm-admin
  user:
    token: %s
contexts:
- name: whelm
  context: {cluster: whelm, user: whelm-admin}
current-context: whelm
`, url, ca, c.token)), 0o600)
}

// proc is a server the cluster started; done is closed once it exited.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// spawn starts a server with its output in DIR/NAME.log.
func (c *cluster) spawn(name, path string, args ...string) error {
	log, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = log.Close()
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	c.procs = append(c.procs, p)
	go func() { _ = cmd.Wait(); close(p.done) }()
	return nil
}

// waitFor polls url until it answers 200, the server exits, or two minutes
// pass (a bound, not a measure: a loaded machine takes seconds).
func (c *cluster) waitFor(name, url string, tlsConfig *tls.Config, token string) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	proc := c.procs[len(c.procs)-1]
	var last error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if proc.exited() {
			return fmt.Errorf("%s exited: %s", name, c.logTail(name))
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return fmt.Errorf("%s is not ready: %v: %s", name, last, c.logTail(name))
}

func (c *cluster) logTail(name string) string {
	b, err := os.ReadFile(filepath.Join(c.dir, name+".log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop ends the servers it started, by PID, the API server first: SIGTERM,
// then SIGKILL if one is still there after 30 seconds.
func (c *cluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			fmt.Fprintf(os.Stderr, "%s (pid %d) outlived SIGTERM by 30s; killing it\n", p.name, p.cmd.Process.Pid)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// kubectl runs kubectl against the cluster.
func (c *cluster) kubectl(stdin string, args ...string) (stdout, stderr string, err error) {
	return c.kubectlAt(c.kubeconfig, stdin, args...)
}

func (c *cluster) kubectlAt(kubeconfig, stdin string, args ...string) (stdout, stderr string, err error) {
	args = append([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(c.dir, "kubectl-cache")}, args...)
	return run(stdin, nil, c.kubectlBin, args...)
}

// strict is the kubeconfig of a second API server over the same etcd (its
// own prefix) that runs with kube-apiserver's default, privileged
// containers refused; started at the first call.
func (c *cluster) strict(t *testing.T) string {
	t.Helper()
	c.strictOnce.Do(func() {
		c.strictKubeconfig, c.strictErr = c.startAPIServer("kube-apiserver-strict", strictAPIServerPort, "/whelm-strict")
	})
	if c.strictErr != nil {
		t.Fatalf("start the second kube-apiserver: %v", c.strictErr)
	}
	return c.strictKubeconfig
}

// helm runs helm against the cluster.
func (c *cluster) helm(args ...string) (string, error) {
	out, _, err := run("", []string{"KUBECONFIG=" + c.kubeconfig}, c.helmBin, args...)
	return out, err
}

// namespace makes a namespace with the given labels; it goes with the
// cluster.
func (c *cluster) namespace(t *testing.T, name string, labels ...string) {
	t.Helper()
	if _, _, err := c.kubectl("", "create", "namespace", name); err != nil {
		t.Fatal(err)
	}
	if len(labels) > 0 {
		if _, _, err := c.kubectl("", append([]string{"label", "namespace", name}, labels...)...); err != nil {
			t.Fatal(err)
		}
	}
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// writeRSAKey writes a new key that signs and checks service account tokens.
func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	block := &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}
	return os.WriteFile(path, pem.EncodeToMemory(block), 0o600)
}
