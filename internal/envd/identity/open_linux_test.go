package identity

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/testenv"
)

// TestOpenDoesNotRaceSymlinkSwap reads through a link that another
// goroutine keeps pointing at a public and at a private directory: Open
// must never hand a normal user the private file, whatever the timing (a
// check of the path followed by an open of the path can be fooled so).
func TestOpenDoesNotRaceSymlinkSwap(t *testing.T) {
	testenv.NeedRoot(t, "user switching tests")
	t.Parallel()
	base, err := os.MkdirTemp("/tmp", "identity-swap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	_ = os.Chmod(base, 0o755)
	for dir, content := range map[string]string{"pub": "public", "priv": "secret"} {
		d := filepath.Join(base, dir)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Chmod(filepath.Join(base, "priv"), 0o700)
	link := filepath.Join(base, "link")
	tmp := filepath.Join(base, "link.tmp")
	if err := os.Symlink("pub", link); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			target := "pub"
			if i%2 == 1 {
				target = "priv"
			}
			_ = os.Remove(tmp)
			_ = os.Symlink(target, tmp)
			_ = os.Rename(tmp, link) // atomic swap
		}
	}()
	u := &User{Name: "u", UID: 4242, GID: 4242, Groups: []uint32{4242}}
	opened := 0
	for range 5000 {
		f, err := u.Open(filepath.Join(link, "f"), unix.O_RDONLY, Read)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(f)
		f.Close()
		opened++
		if string(b) != "public" {
			close(stop)
			wg.Wait()
			t.Fatalf("read %q through the swapped link", b)
		}
	}
	close(stop)
	wg.Wait()
	if opened == 0 {
		t.Fatal("the public file was never opened")
	}
	t.Logf("opened %d of 5000", opened)
}
