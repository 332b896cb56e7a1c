package placement

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store"
)

// Volumes (docs/volumes.md, "Many machines"): a volume lives on one node,
// and a sandbox that mounts volumes is placed on theirs, or not at all.
// The Service is the volumes' internal/volumes.Nodes.

func (s *Service) volumeStore() (store.VolumeStore, error) {
	vs, ok := s.st.(store.VolumeStore)
	if !ok {
		return nil, fmt.Errorf("placement: the store keeps no volumes: %w", errdefs.ErrUnsupported)
	}
	return vs, nil
}

// VolumeCandidates returns the ready nodes that take placements, those
// holding the fewest volumes first (ties in random order). sizeMB is not
// looked at: each node checks its own disk and refuses what does not
// fit, and the next candidate is asked.
func (s *Service) VolumeCandidates(ctx context.Context, sizeMB int64) ([]string, error) {
	vs, err := s.volumeStore()
	if err != nil {
		return nil, err
	}
	nodes, err := s.st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	vols, err := vs.ListVolumes(ctx, store.VolumeFilter{})
	if err != nil {
		return nil, err
	}
	held := map[string]int{}
	for _, v := range vols {
		held[v.NodeID]++
	}
	var out []string
	for _, n := range nodes {
		if n.Schedulable() {
			out = append(out, n.ID)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	sort.SliceStable(out, func(i, j int) bool { return held[out[i]] < held[out[j]] })
	if len(out) == 0 {
		return nil, errdefs.Publicf(errdefs.ErrExhausted, "no ready node can take a volume now")
	}
	return out, nil
}

// VolumeNode returns node nodeID's volume service; a node that is not
// ready is ErrUnavailable, one not registered ErrNotFound.
func (s *Service) VolumeNode(ctx context.Context, nodeID string) (nodeapi.VolumeService, error) {
	n, err := s.st.GetNode(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	if n.Liveness != store.NodeReady {
		return nil, fmt.Errorf("node %q is %s: %w", nodeID, n.Liveness, errdefs.ErrUnavailable)
	}
	vs, ok := s.client(n).(nodeapi.VolumeService)
	if !ok {
		return nil, fmt.Errorf("node %q keeps no volumes: %w", nodeID, errdefs.ErrUnsupported)
	}
	return vs, nil
}

// volumeNode is the node a create that mounts volumes goes to: the one
// every one of them lives on, if it is ready, takes placements and has
// room for want (ErrExhausted naming it otherwise: the sandbox cannot go
// anywhere else).
func (s *Service) volumeNode(ctx context.Context, req nodeapi.CreateRequest, want store.NodeResources) (*store.Node, error) {
	vs, err := s.volumeStore()
	if err != nil {
		return nil, err
	}
	nodeID, first := "", ""
	for _, m := range req.Volumes {
		v, err := vs.GetVolume(ctx, m.ID)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", m.ID, err)
		}
		switch {
		case nodeID == "":
			nodeID, first = v.NodeID, v.Name
		case v.NodeID != nodeID:
			return nil, errdefs.Publicf(errdefs.ErrInvalid, "volumes %q and %q live on different nodes: a sandbox mounts volumes of one node only", first, v.Name)
		}
	}
	n, err := s.st.GetNode(ctx, nodeID)
	if errdefs.IsNotFound(err) {
		return nil, errdefs.Publicf(errdefs.ErrUnavailable, "the node that holds volume %q is not registered", first)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case n.Liveness != store.NodeReady:
		return nil, errdefs.Publicf(errdefs.ErrUnavailable, "the node that holds volume %q is %s", first, n.Liveness)
	case !n.Schedulable():
		return nil, errdefs.Publicf(errdefs.ErrExhausted, "the node that holds volume %q takes no new sandboxes now (%s)", first, n.Status())
	case !n.Capacity.Fits(n.Allocated, want):
		return nil, errdefs.Publicf(errdefs.ErrExhausted, "the node that holds volume %q has no room for a sandbox of %d vCPUs and %d MiB now", first, want.VCPUs, want.MemoryMB)
	}
	return n, nil
}

// createOnVolumes is Create for a sandbox that mounts volumes: on their
// node, or an error that names it.
func (s *Service) createOnVolumes(ctx context.Context, req nodeapi.CreateRequest, want store.NodeResources) (*nodeapi.Sandbox, error) {
	n, err := s.volumeNode(ctx, req, want)
	if err != nil {
		s.m.creates.WithLabelValues("no_node").Inc()
		return nil, fmt.Errorf("place sandbox %q: %w", req.ID, err)
	}
	if err := s.st.ReserveOnNode(ctx, n.ID, req.ID, want); err != nil {
		s.m.creates.WithLabelValues("no_node").Inc()
		if errdefs.IsExhausted(err) {
			s.m.refusals.Inc()
			return nil, errdefs.WithMessage(err, fmt.Sprintf("the node that holds the sandbox's volumes has no room for a sandbox of %d vCPUs and %d MiB now", want.VCPUs, want.MemoryMB))
		}
		return nil, fmt.Errorf("place sandbox %q: %w", req.ID, err)
	}
	sb, err := s.client(n).Create(ctx, req)
	if err != nil {
		s.release(context.WithoutCancel(ctx), req.ID)
		s.m.refusals.Inc()
		return nil, err
	}
	s.log.Info("sandbox placed on its volumes' node", "sandbox_id", req.ID, "node_id", n.ID)
	s.m.creates.WithLabelValues("placed").Inc()
	return sb, nil
}
