package nodereg

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// templateHolder is the optional part of a node's Service that names the
// template builds its sandboxes and pools use (the agent's
// TemplatesInUse; nodeapi.TemplateHolder where the contract has it).
type templateHolder interface {
	TemplatesInUse(ctx context.Context) ([]nodeapi.TemplateUse, error)
}

// Collect fills what a node's Service knows into base (its ID, addresses,
// boot ID, version and capacity are the caller's): the resources of its
// running sandboxes, their count, its pools when it is a nodeapi.Pooler,
// and the template builds it holds (base.Templates, plus the builds its
// sandboxes and pools use when it tells them), which placement prefers,
// and the kills it made on its own when it keeps them
// (nodeapi.KillReporter). A node's status func for Client.Run is
//
//	func(ctx context.Context) (nodereg.Status, error) { return nodereg.Collect(ctx, agent, base) }
func Collect(ctx context.Context, svc nodeapi.Service, base Status) (Status, error) {
	sbs, err := svc.List(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("node %q status: %w", base.ID, err)
	}
	st := base
	st.Allocated, st.Sandboxes = store.NodeResources{}, 0
	for _, sb := range sbs {
		st.Sandboxes++
		if sb.State == sandbox.StatePaused {
			continue // holds only its snapshot on disk
		}
		st.Allocated.VCPUs += int64(sb.Resources.VCPUs)
		st.Allocated.MemoryMB += sb.Resources.MemoryMB
	}
	if pl, ok := svc.(nodeapi.Pooler); ok {
		st.Pools = st.Pools[:0:0]
		for tmpl, p := range pl.Pools() {
			st.Pools = append(st.Pools, store.NodePool{TemplateID: tmpl, BuildID: p.BuildID, Size: p.Size, Ready: p.Ready})
		}
		sort.Slice(st.Pools, func(i, j int) bool { return st.Pools[i].TemplateID < st.Pools[j].TemplateID })
	}
	held := map[string]bool{}
	for _, b := range base.Templates {
		held[b] = true
	}
	if th, ok := svc.(templateHolder); ok {
		uses, err := th.TemplatesInUse(ctx)
		if err != nil {
			return Status{}, fmt.Errorf("node %q templates: %w", base.ID, err)
		}
		for _, u := range uses {
			held[u.BuildID] = true
		}
	}
	for _, p := range st.Pools {
		held[p.BuildID] = true
	}
	delete(held, "")
	st.Templates = make([]string, 0, len(held))
	for b := range held {
		st.Templates = append(st.Templates, b)
	}
	sort.Strings(st.Templates)
	if st.Kills, err = ownKills(ctx, svc); err != nil {
		return Status{}, fmt.Errorf("node %q kills: %w", base.ID, err)
	}
	return st, nil
}

// BinaryVersion is the running binary's module version and VCS revision,
// as a node reports it.
func BinaryVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}

// NewBootID returns a boot ID for a node: the host's boot ID (the
// kernel's, new at every boot of the machine), so that a node process
// that restarts on a machine that did not reboot keeps it, with the
// sandboxes it recovers; only a reboot (nothing survived) changes it. A
// host without one gets a random ID per process start.
func NewBootID() string {
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" && len(id) <= 128 {
			return id
		}
	}
	return sandbox.RandomToken(16)
}

// HostCapacity is this host's CPUs and memory (MemTotal), what a node
// offers by default.
func HostCapacity() (store.NodeResources, error) {
	c := store.NodeResources{VCPUs: int64(runtime.NumCPU())}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return c, fmt.Errorf("host memory: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		v, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return c, fmt.Errorf("host memory: MemTotal %q: %w", strings.TrimSpace(v), err)
		}
		c.MemoryMB = kb / 1024
		return c, nil
	}
	return c, fmt.Errorf("host memory: no MemTotal in /proc/meminfo: %w", errdefs.ErrUnavailable)
}
