package hostlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func names(data string) []Name {
	return []Name{
		{Kind: "data dir", Flag: "--data-dir", Value: data, Path: true},
		{Kind: "nftables table", Flag: "--nft-table", Value: "warren-locktest"},
	}
}

// A second holder of the same names is refused with the name and the
// first holder's PID; after Release, the names are free again.
func TestAcquireConflicts(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), t.TempDir()
	first, err := Acquire(dir, names(data))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir, names(data))
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "--data-dir") ||
		!strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Acquire: %v", err)
	}
	// Other names on the same host are fine.
	other, err := Acquire(dir, []Name{{Kind: "nftables table", Flag: "--nft-table", Value: "warren-other"}})
	if err != nil {
		t.Fatalf("another name: %v", err)
	}
	other.Release()
	first.Release()
	again, err := Acquire(dir, names(data))
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.Release()
}

// A lock dies with its process, crash included.
func TestLockEndsWithProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "nftables-table-warren-crash.lock")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// flock(1) takes the lock and becomes sleep; killing it frees the lock.
	cmd := exec.Command("flock", "--no-fork", "-x", file, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("flock(1): %v", err)
	}
	n := []Name{{Kind: "nftables table", Flag: "--nft-table", Value: "warren-crash"}}
	var err error
	for range 250 { // until flock(1) holds it
		var l *Locks
		if l, err = Acquire(dir, n); err != nil {
			break
		}
		l.Release()
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Acquire while held by another process: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := Acquire(dir, n)
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	l.Release()
}
