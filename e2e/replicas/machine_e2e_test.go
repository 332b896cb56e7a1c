//go:build e2e

package replicas

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// hostAddr is the host side of every node link: the replicas listen on it.
// Each link is a veth pair with a /32 on either end and a route to the
// other end, so that one host address serves every machine.
const hostAddr = "100.109.0.1"

// machine is a network namespace that stands for one node's machine,
// joined to the host's namespace by a veth pair (hostIf there, nodeIf in
// the namespace) with addr on its side.
type machine struct {
	ns, hostIf, nodeIf, addr string
}

// ip runs ip(8) with args and fails the test when it fails.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newMachine makes the namespace and its link; the test's end deletes
// both (call it before starting anything that runs in the namespace, so
// that its clean-up comes after theirs).
func newMachine(t *testing.T, name, ifPrefix, addr string) *machine {
	t.Helper()
	m := &machine{ns: fmt.Sprintf("warren-e2e-rp%s-%d", name, os.Getpid()), hostIf: ifPrefix + "h", nodeIf: ifPrefix + "n", addr: addr}
	removeStale(name)
	m.remove() // a link left by a run that was killed
	t.Cleanup(m.remove)
	ip(t, "netns", "add", m.ns)
	ip(t, "link", "add", m.hostIf, "type", "veth", "peer", "name", m.nodeIf, "netns", m.ns)
	ip(t, "addr", "add", hostAddr+"/32", "dev", m.hostIf)
	ip(t, "link", "set", m.hostIf, "up")
	ip(t, "route", "add", addr+"/32", "dev", m.hostIf, "src", hostAddr)
	ip(t, "-n", m.ns, "link", "set", "lo", "up")
	ip(t, "-n", m.ns, "addr", "add", addr+"/32", "dev", m.nodeIf)
	ip(t, "-n", m.ns, "link", "set", m.nodeIf, "up")
	ip(t, "-n", m.ns, "route", "add", hostAddr+"/32", "dev", m.nodeIf, "src", addr)
	return m
}

// removeStale deletes the namespaces of machine name that a killed run of
// this package left (their process is gone).
func removeStale(name string) {
	stale, _ := filepath.Glob("/run/netns/warren-e2e-rp" + name + "-*")
	for _, ns := range stale {
		pid, err := strconv.Atoi(ns[strings.LastIndex(ns, "-")+1:])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = exec.Command("ip", "netns", "del", filepath.Base(ns)).Run()
	}
}

// remove deletes the namespace (and with it its end of the veth pair and
// whatever the node left in it: sandbox veths, its nftables table) and the
// host's end.
func (m *machine) remove() {
	_ = exec.Command("ip", "netns", "del", m.ns).Run()
	_ = exec.Command("ip", "link", "del", m.hostIf).Run()
}

// command is name with args run inside the machine's network namespace
// (nsenter --net: the mounts stay the host's, /sys/fs/cgroup among them,
// which `ip netns exec` would remount).
func (m *machine) command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + m.ns, name}, args...)...)
}
