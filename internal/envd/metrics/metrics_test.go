package metrics

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSampleFromFixture(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("meminfo", "MemTotal:        1024 kB\nMemFree:          100 kB\nMemAvailable:     256 kB\nCached:           128 kB\n")
	write("stat", "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 1 1 1\n")
	s := &Sampler{ProcRoot: root, DiskPath: root}
	if _, err := s.Sample(); err != nil {
		t.Fatal(err)
	}
	// 100 more busy and 100 more idle jiffies: 50 %.
	write("stat", "cpu  150 0 150 900 0 0 0 0 0 0\n")
	m, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if m.MemTotal != 1024*1024 || m.MemUsed != 768*1024 || m.MemCache != 128*1024 || m.CPUUsedPct != 50 || m.DiskTotal == 0 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestReadMemInfoErrors(t *testing.T) {
	t.Parallel()
	if _, err := ReadMemInfo(t.TempDir()); err == nil {
		t.Fatal("missing meminfo accepted")
	}
}
