package nodereg

import (
	"context"
	"fmt"
	"runtime/debug"
	"sort"

	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// Collect fills what a node's Service knows into base (its ID, addresses,
// boot ID, version, capacity and templates are the caller's): the
// resources of its running sandboxes, their count, and its pools when it
// is a nodeapi.Pooler. A node's status func for Client.Run is
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
