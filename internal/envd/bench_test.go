package envd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func benchServer(b *testing.B) *httptest.Server {
	b.Helper()
	cfg := DefaultConfig()
	cfg.PortForward = false
	cfg.Init = false
	s, err := New(cfg, testenv.Logger(b))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkExecRoundTrip runs `true` through Process.Start (Connect JSON,
// as the SDK does) and waits for the end event; it reports p50 and p99.
func BenchmarkExecRoundTrip(b *testing.B) {
	srv := benchServer(b)
	c := processconnect.NewProcessClient(srv.Client(), srv.URL, connect.WithProtoJSON())
	ctx := context.Background()
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		s, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true"}}))
		if err != nil {
			b.Fatal(err)
		}
		ended := false
		for s.Receive() {
			if s.Msg().GetEvent().GetEnd() != nil {
				ended = true
			}
		}
		if err := s.Err(); err != nil || !ended {
			b.Fatalf("stream: %v ended=%v", err, ended)
		}
		_ = s.Close()
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	pct := func(p float64) time.Duration { return durations[int(float64(len(durations)-1)*p)] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99_ms")
}

// BenchmarkFiles writes and reads files through /files (octet-stream
// upload, plain download) and reports throughput (MB/s).
func BenchmarkFiles(b *testing.B) {
	srv := benchServer(b)
	dir := b.TempDir()
	for _, size := range []int64{1 << 20, 100 << 20} {
		name := fmt.Sprintf("%dMiB", size>>20)
		path := filepath.Join(dir, name)
		u := srv.URL + "/files?path=" + url.QueryEscape(path)
		data := bytes.Repeat([]byte("warren!\n"), int(size/8))
		b.Run("write/"+name, func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				resp, err := http.Post(u, "application/octet-stream", bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
		b.Run("read/"+name, func(b *testing.B) {
			b.SetBytes(size)
			tr := &http.Transport{DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			for i := 0; i < b.N; i++ {
				resp, err := client.Get(u)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 || n != size {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
		})
	}
}

// BenchmarkIdleRSS starts the built envd ($WARREN_ENVD) and reports its
// resident memory once listening and after some requests (KiB).
func BenchmarkIdleRSS(b *testing.B) {
	bin := os.Getenv("WARREN_ENVD")
	if bin == "" {
		b.Skip("WARREN_ENVD not set")
	}
	port := freePort(b)
	cmd := exec.Command(bin, "--listen", "127.0.0.1", "--port", strconv.Itoa(port), "--no-port-forward")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), "envd listening") {
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	b.ReportMetric(float64(rssKiB(b, cmd.Process.Pid)), "idle_rss_KiB")
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	for i := 0; i < 100; i++ {
		resp, err := http.Get(base + "/health")
		if err != nil {
			b.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	b.ReportMetric(float64(rssKiB(b, cmd.Process.Pid)), "rss_after_100_health_KiB")
}

func freePort(b *testing.B) int {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func rssKiB(b *testing.B, pid int) int {
	b.Helper()
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
