package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/store"
)

// ServerConfig describes a `warren serve` the bench starts for one driver.
type ServerConfig struct {
	// Warren is the warren binary; Driver its --driver.
	Warren string
	Driver string
	// Index tells servers of one run apart (address range, veth prefix,
	// nftables table); Index 0 and 1 never collide.
	Index int
	// WorkDir is where the data directory is made (removed on Stop).
	WorkDir string
	// MaxConcurrent is the default team's concurrency limit, set in the
	// store before the server starts.
	MaxConcurrent int
	// Extra are more serve flags (--runsc, --envd, --base-rootfs).
	Extra []string
	// StartTimeout bounds the wait for /health (the first start unpacks
	// the base template; default 10 minutes).
	StartTimeout time.Duration
	Log          *slog.Logger
}

// Server is a running `warren serve`.
type Server struct {
	URL, APIKey, AdminToken string
	// CgroupRoot is the server's --cgroup-root.
	CgroupRoot string
	iso        hostIsolation
	cmd        *exec.Cmd
	dataDir    string
	done       chan error
	log        *slog.Logger
}

// StartServer seeds a fresh data directory (default team with the
// concurrency limit, an API key) and starts `warren serve` on a free
// loopback port with host objects of its own, then waits until it answers.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 10 * time.Minute
	}
	dataDir, err := os.MkdirTemp(cfg.WorkDir, "warren-bench-"+cfg.Driver+"-")
	if err != nil {
		return nil, fmt.Errorf("bench server %s: data dir: %w", cfg.Driver, err)
	}
	key, err := seed(ctx, dataDir, cfg.MaxConcurrent)
	if err != nil {
		os.RemoveAll(dataDir)
		return nil, fmt.Errorf("bench server %s: %w", cfg.Driver, err)
	}
	adminToken := randomHex(16)
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dataDir)
		return nil, fmt.Errorf("bench server %s: %w", cfg.Driver, err)
	}
	iso := isolation(os.Getpid(), cfg.Index, cfg.Driver)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"serve", "--driver", cfg.Driver, "--listen", addr, "--data-dir", dataDir, "--api-key", key, "--admin-token", adminToken,
		"--cgroup-root", iso.cgroupRoot, "--net-cidr", iso.cidr, "--nft-table", iso.nftTable, "--veth-prefix", iso.vethPrefix,
		// No warm pool of its own: the pass without a pool has none, the
		// pooled pass sets one through the admin API.
		"--pool-size", "0"}
	args = append(args, cfg.Extra...)
	logf, err := os.Create(filepath.Join(dataDir, "serve.log"))
	if err != nil {
		os.RemoveAll(dataDir)
		return nil, fmt.Errorf("bench server %s: log: %w", cfg.Driver, err)
	}
	cmd := exec.Command(cfg.Warren, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	endWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dataDir)
		return nil, fmt.Errorf("bench server %s: start %s: %w", cfg.Driver, cfg.Warren, err)
	}
	s := &Server{URL: "http://" + addr, APIKey: key, AdminToken: adminToken, CgroupRoot: iso.cgroupRoot, iso: iso, cmd: cmd, dataDir: dataDir, done: make(chan error, 1), log: cfg.Log}
	go func() { s.done <- cmd.Wait(); logf.Close() }()
	cfg.Log.Info("bench: started warren serve", "driver", cfg.Driver, "url", s.URL, "data_dir", dataDir, "pid", cmd.Process.Pid)
	if err := s.waitHealthy(ctx, cfg.StartTimeout); err != nil {
		s.Stop()
		return nil, fmt.Errorf("bench server %s: %w (log: %s)", cfg.Driver, err, filepath.Join(dataDir, "serve.log"))
	}
	return s, nil
}

type hostIsolation struct {
	cgroupRoot, cidr, nftTable, vethPrefix string
}

// isolation names the host objects of server index of process pid.
func isolation(pid, index int, driver string) hostIsolation {
	return hostIsolation{
		cgroupRoot: fmt.Sprintf("warren-bench-%d-%s", pid, driver),
		// 100.64.0.0/10 (shared address space): 100.100.0.0/16 upwards,
		// two per process so that the servers of one run differ.
		cidr:       fmt.Sprintf("100.%d.0.0/16", 100+2*(pid%12)+index%2),
		nftTable:   fmt.Sprintf("warren_bench_%d_%d", pid, index),
		vethPrefix: "b" + string(rune('a'+index%26)),
	}
}

// seed creates the default team with the concurrency limit and returns
// a fresh API key for --api-key.
func seed(ctx context.Context, dataDir string, maxConcurrent int) (string, error) {
	st, err := apirole.OpenStore(ctx, dataDir, "", nil)
	if err != nil {
		return "", fmt.Errorf("seed store: %w", err)
	}
	defer st.Close()
	err = st.CreateTeam(ctx, &store.Team{ID: apiserver.DefaultTeamID, Name: "default", CreatedAt: time.Now(),
		Limits: store.Limits{MaxConcurrent: maxConcurrent}})
	if err != nil {
		return "", fmt.Errorf("seed default team: %w", err)
	}
	return "e2b_" + randomHex(20), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/health", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 { // 204 (the spec's), or 200
				return nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("warren serve exited before answering: %v: %w", err, errdefs.ErrUnavailable)
		case <-ctx.Done():
			return fmt.Errorf("warren serve did not answer /health within %s: %w", timeout, errors.Join(errdefs.ErrUnavailable, ctx.Err()))
		case <-tick.C:
		}
	}
}

// Stop ends the server (SIGTERM, SIGKILL after a minute) and removes its
// data directory, nftables table and cgroup root. Sandboxes should be
// killed first: a stopped server leaves them running for its next start.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	if err := removeHostObjects(context.Background(), s.iso, s.dataDir); err != nil {
		s.log.Warn("bench: host objects left behind", "error", err)
	}
	if err := os.RemoveAll(s.dataDir); err != nil {
		s.log.Warn("bench: data dir left behind", "data_dir", s.dataDir, "error", err)
	}
}
