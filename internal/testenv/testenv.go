// Package testenv is what Warren's tests share about the machine they run
// on:
//   - the rule for prerequisites (root, runsc, a built binary): a missing
//     one skips the test with the reason, and fails it under CI=true, where
//     every prerequisite must be present (Require, NeedRoot, File);
//   - the binaries and root filesystem tests take from the environment
//     (WARREN_RUNSC, WARREN_ENVD, WARREN_WARREN, WARREN_TEST_ROOTFS_TAR);
//   - names of host objects (cgroup roots, nftables tables, netns, data
//     dirs) unique to a test, so that concurrent tests and engineers never
//     share one (Name);
//   - a logger writing to the test's own output, shown when the test fails
//     or runs with -v (Logger).
//
// Only tests and test helper packages import it; the binaries never link it
// (internal/nodeapi's dependency test checks).
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
)

// CI reports whether the tests run under CI (CI=true), where a missing
// prerequisite is a failure.
func CI() bool { return os.Getenv("CI") == "true" }

// Require skips t when ok is false, saying reason; under CI it fails t.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if CI() && !Unprivileged() {
		t.Fatalf("prerequisite missing under CI=true: %s", reason)
	}
	t.Skipf("skipping: %s", reason)
}

// Unprivileged reports whether the tests run as `make check` runs them
// (WARREN_TEST_UNPRIVILEGED=1): then no test that needs root runs, even
// as root, and a missing prerequisite is a skip, even under CI=true.
func Unprivileged() bool { return os.Getenv("WARREN_TEST_UNPRIVILEGED") == "1" }

// NeedRoot requires root, for what (e.g. "cgroup tests"); under
// Unprivileged it skips.
func NeedRoot(t testing.TB, what string) {
	t.Helper()
	if Unprivileged() {
		t.Skipf("skipping: %s need root (WARREN_TEST_UNPRIVILEGED=1)", what)
	}
	Require(t, os.Geteuid() == 0, what+" need root")
}

// File requires the file named by environment variable env (what it is:
// "runsc", "the envd binary") and returns its path.
func File(t testing.TB, env, what string) string {
	t.Helper()
	p := os.Getenv(env)
	_, err := os.Stat(p)
	Require(t, p != "" && err == nil, fmt.Sprintf("%s at $%s (%q)", what, env, p))
	return p
}

// Runsc is the runsc binary ($WARREN_RUNSC).
func Runsc(t testing.TB) string { t.Helper(); return File(t, "WARREN_RUNSC", "runsc") }

// Envd is the static envd binary ($WARREN_ENVD).
func Envd(t testing.TB) string { t.Helper(); return File(t, "WARREN_ENVD", "the envd binary") }

// Warren is the warren binary ($WARREN_WARREN).
func Warren(t testing.TB) string { t.Helper(); return File(t, "WARREN_WARREN", "the warren binary") }

// RootFSTar is the base root filesystem tar ($WARREN_TEST_ROOTFS_TAR).
func RootFSTar(t testing.TB) string {
	t.Helper()
	return File(t, "WARREN_TEST_ROOTFS_TAR", "the base root filesystem tar")
}

// Name is prefix followed by 8 random hex digits: a host object name no
// other test (or test run) uses, e.g. Name("warren-test-") for a cgroup
// root. Keep prefix short where the kernel bounds names (interfaces: 15
// bytes).
func Name(prefix string) string {
	var b [4]byte
	rand.Read(b[:]) // never fails
	return prefix + hex.EncodeToString(b[:])
}

// Logger is a slog logger (text, Info and above) writing to t's output.
// What is logged after t ended (a goroutine the test left behind) is
// dropped, not a panic.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(Output(t), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Output is t.Output() until t's clean-up runs, then a sink.
func Output(t testing.TB) io.Writer {
	w := &testWriter{out: t.Output()}
	t.Cleanup(w.close)
	return w
}

type testWriter struct {
	mu     sync.Mutex
	out    io.Writer
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return len(p), nil
	}
	return w.out.Write(p)
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}
