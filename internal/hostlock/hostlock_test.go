package hostlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// With --no-fork, flock(1) becomes sleep once it holds the lock.
	for i := 0; ; i++ {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
		if strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if i == 250 {
			t.Fatal("flock(1) did not take the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := Acquire(dir, n)
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

// Release removes the lock files of names that are not paths (so the lock
// directory does not grow with every name ever used) and keeps a data
// directory's; taking and releasing the same name from many goroutines at
// once never lets two hold it, although files are removed under them.
func TestReleaseRemovesLockFiles(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), t.TempDir()
	l, err := Acquire(dir, names(data))
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("lock files left in %s: %v", dir, left)
	}
	if _, err := os.Stat(filepath.Join(data, ".warren.lock")); err != nil {
		t.Errorf("the data dir's lock file: %v", err)
	}

	n := []Name{{Kind: "nftables table", Flag: "--nft-table", Value: "warren-race"}}
	var holders, max, taken atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				l, err := Acquire(dir, n)
				if err != nil {
					continue // held by another goroutine
				}
				taken.Add(1)
				h := holders.Add(1)
				if h > max.Load() {
					max.Store(h)
				}
				time.Sleep(100 * time.Microsecond) // hold it a while
				holders.Add(-1)
				l.Release()
			}
		})
	}
	wg.Wait()
	if max.Load() > 1 || taken.Load() == 0 {
		t.Errorf("at most %d holders at once (want 1), %d takes", max.Load(), taken.Load())
	}
}
