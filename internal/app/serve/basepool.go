package serve

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// The warm pools of base and of the code interpreter's and the MCP
// gateway's templates (when they are offered) are on by default: their creates claim a ready
// sandbox instead of starting one. Config.DefaultPools sets their size at
// every start; PoolSizeAuto sizes each from the host and its members'
// memory (AutoPoolSize) and 0 turns them off. Pools of other templates are set
// through the admin API and kept by the node across restarts as before;
// a size set that way for base lasts until the next start.

// PoolSizeAuto asks for the base pool sized from the host.
const PoolSizeAuto = -1

// MaxAutoPool caps the automatic base pool size.
const MaxAutoPool = 4

// autoPoolMemoryShare is the share of host memory (1/n) the members'
// memory limits may add up to at most.
const autoPoolMemoryShare = 8

// AutoPoolSize returns the base pool size for a host with cpus CPUs and
// memMiB of memory, for members with memberMiB of memory each, and why:
// one member per CPU, at most MaxAutoPool, and no more than fit with
// their memory limits in an eighth of the host's memory.
//
// A ready member is frozen: it uses no CPU and little memory (its boot
// footprint, about 25 MiB with runsc), but each claim starts a
// replacement, about a CPU-second of work; more members than CPUs would
// make a burst's refills compete with the sandboxes just claimed. The
// memory bound counts the members' limits, not their use, so that a
// small host never holds more ready sandboxes than it could run.
func AutoPoolSize(cpus int, memMiB, memberMiB int64) (int, string) {
	size := min(max(cpus, 0), MaxAutoPool)
	byMem := int64(size)
	if memberMiB > 0 {
		byMem = memMiB / autoPoolMemoryShare / memberMiB
	}
	if byMem < int64(size) {
		size = int(byMem)
	}
	return size, fmt.Sprintf("min(%d, %d CPUs, %d MiB memory / %d / %d MiB per member)",
		MaxAutoPool, cpus, memMiB, autoPoolMemoryShare, memberMiB)
}

// ParsePoolSize parses a --pool-size value: "auto" or a size 0 to 100.
func ParsePoolSize(v string) (int, error) {
	if v == "auto" {
		return PoolSizeAuto, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 100 {
		return 0, fmt.Errorf("pool size %q: auto or 0 to 100: %w", v, errdefs.ErrInvalid)
	}
	return n, nil
}

// defaultPoolTemplates are the system templates whose warm pools
// Config.DefaultPools sizes at every start: base, and the code
// interpreter's and the MCP gateway's when they are offered (their root
// filesystem tars exist).
var defaultPoolTemplates = []string{"base", noderole.CodeInterpreterID, noderole.MCPGatewayID}

// setDefaultPools sets the warm pool of each of defaultPoolTemplates that
// exists to size (PoolSizeAuto: sized from the host for that template's
// members). base must exist; a code interpreter that is not offered is
// skipped.
func setDefaultPools(ctx context.Context, size int, pools nodeapi.Pooler, tmpls apiserver.TemplateResolver, api *apiserver.Server, log *slog.Logger) error {
	for _, name := range defaultPoolTemplates {
		err := setDefaultPool(ctx, name, size, pools, tmpls, api, log)
		if errdefs.IsNotFound(err) && name != "base" {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// setDefaultPool sets the warm pool of the system template name to size
// (PoolSizeAuto: sized from the host) with the resources the API gives a
// create of it with default resources, so that such creates claim its
// members. It logs what was chosen.
func setDefaultPool(ctx context.Context, name string, size int, pools nodeapi.Pooler, tmpls apiserver.TemplateResolver, api *apiserver.Server, log *slog.Logger) error {
	tmpl, err := tmpls.Resolve(ctx, apiserver.DefaultTeamID, name)
	if err != nil {
		return fmt.Errorf("warm pool of %s: %w", name, err)
	}
	res := api.SandboxResources(tmpl)
	why := "--pool-size"
	if size == PoolSizeAuto {
		var err error
		size, why, err = HostPoolSize(res.MemoryMB)
		if err != nil {
			log.Warn("default warm pool off: host memory unknown", "template", name, "error", err)
		}
		why = "auto: " + why
	}
	if err := pools.SetPool(ctx, tmpl, res, size); err != nil {
		return fmt.Errorf("warm pool of %s: %w", name, err)
	}
	log.Info("default warm pool", "template", name, "size", size, "chosen_by", why, "build_id", tmpl.BuildID,
		"vcpus", res.VCPUs, "memory_mb", res.MemoryMB)
	return nil
}

// HostPoolSize is AutoPoolSize for this host (its CPUs and MemTotal) and
// members of memberMiB; 0 when the host's memory cannot be read (the
// error says why).
func HostPoolSize(memberMiB int64) (int, string, error) {
	mem, err := hostMemoryMiB()
	size, why := AutoPoolSize(runtime.NumCPU(), mem, memberMiB)
	return size, why, err
}

// hostMemoryMiB returns the host's MemTotal in MiB.
func hostMemoryMiB() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("host memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "MemTotal" {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("host memory: MemTotal %q: %w", v, err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("host memory: no MemTotal in /proc/meminfo: %w", errdefs.ErrUnavailable)
}
