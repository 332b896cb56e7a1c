// Package placement is a nodeapi.Service over many nodes (docs/node.md):
// the `warren api` role's lifecycle holds it as it holds the one local
// agent under `warren serve`.
//
// Creates go to the best of K ready nodes by free capacity, preferring
// nodes that hold the template; the capacity is reserved on the node's row
// in the store (store.ReserveOnNode, one conditional UPDATE), so API
// replicas sharing Postgres never overcommit a node, and in-flight creates
// count. A node that refuses a create is given back its reservation and
// the next candidate is tried. Every other call goes to the node that
// holds the sandbox (the node ID on its store row): resume and fork stay
// on the node that has the snapshot or the source. A pause, a kill or an
// exit gives the reservation back.
package placement

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// Store is the store with its node registry (*store.SQL).
type Store interface {
	store.Store
	store.NodeRegistry
}

// Config configures a Service.
type Config struct {
	Store Store
	// Dial returns the Service of a node; nil dials its RPC address with
	// nodeclient, Credential and TLS.
	Dial func(n *store.Node) nodeapi.Service
	// Credential gives the credential of the calls to node nodeID (its own:
	// nodereg.Credentials with nodeauth.PurposeRPC); nil: none (loopback
	// nodes without tokens).
	Credential func(ctx context.Context, nodeID string) (string, error)
	// TLS verifies the nodes' certificates (nil: the system's roots). A
	// node is called over https, or over http on loopback only
	// (nodeauth.CheckRPCURL).
	TLS *tls.Config
	// K is how many candidates a create compares (default 3).
	K int
	// WatchRefresh is how often Watch looks for nodes to watch (default
	// 2 s).
	WatchRefresh time.Duration
	// CallTimeout bounds List and Capabilities on one node (default 10 s).
	CallTimeout time.Duration
	Logger      *slog.Logger
	// Registry receives placement_creates_total{result} and
	// placement_node_refusals_total; nil registers nothing.
	Registry prometheus.Registerer
}

// Service places sandboxes on the registered nodes.
type Service struct {
	cfg Config
	st  Store
	log *slog.Logger
	m   *metrics

	mu      sync.Mutex
	clients map[string]dialed // node ID → its client
}

type dialed struct {
	addr string
	svc  nodeapi.Service
}

var (
	_ nodeapi.Service         = (*Service)(nil)
	_ nodeapi.ExecutionKiller = (*Service)(nil)
	_ nodeapi.MetricsSource   = (*Service)(nil)
)

// New returns a placement Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("placement: a store is required: %w", errdefs.ErrInvalid)
	}
	if cfg.K <= 0 {
		cfg.K = 3
	}
	if cfg.WatchRefresh <= 0 {
		cfg.WatchRefresh = 2 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Dial == nil {
		hc, cred := nodeauth.Client(cfg.TLS), cfg.Credential
		cfg.Dial = func(n *store.Node) nodeapi.Service {
			if err := nodeauth.CheckRPCURL(n.RPCAddress); err != nil {
				return unreachable{err: fmt.Errorf("node %q: %w: %w", n.ID, errdefs.ErrUnavailable, err)}
			}
			opts := nodeclient.Options{HTTPClient: hc, Logger: cfg.Logger}
			if cred != nil {
				id := n.ID
				opts.Credential = func(ctx context.Context) (string, error) { return cred(ctx, id) }
			}
			return nodeclient.New(n.RPCAddress, opts)
		}
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("placement metrics: %w", err)
	}
	return &Service{cfg: cfg, st: cfg.Store, log: cfg.Logger, m: m, clients: map[string]dialed{}}, nil
}

// client returns node n's Service, dialing it again when its address
// changed.
func (s *Service) client(n *store.Node) nodeapi.Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.clients[n.ID]; ok && d.addr == n.RPCAddress {
		return d.svc
	}
	d := dialed{addr: n.RPCAddress, svc: s.cfg.Dial(n)}
	s.clients[n.ID] = d
	return d.svc
}

// ownProxy makes sb name node n's proxy listener as the registry has it,
// whatever the node said: the edge proxy sends the sandbox's traffic (and
// n's credential) nowhere else.
func ownProxy(n *store.Node, sb *nodeapi.Sandbox) *nodeapi.Sandbox {
	if sb != nil {
		sb.NodeProxy = n.ProxyAddress
	}
	return sb
}

// holder returns the node that holds sandbox id and its Service, from the
// sandbox's store row (its node ID is written with the reservation, so
// every replica finds it).
func (s *Service) holder(ctx context.Context, id string) (*store.Node, nodeapi.Service, error) {
	sb, err := s.st.GetSandbox(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	nodeID := sb.Spec.NodeID
	n, err := s.st.GetNode(ctx, nodeID)
	if errdefs.IsNotFound(err) {
		return nil, nil, fmt.Errorf("sandbox %q: on no registered node (%q): %w", id, nodeID, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, nil, err
	}
	return n, s.client(n), nil
}

// reachable is holder for calls that need the node to answer: a sandbox
// on an unreachable or lost node is ErrUnavailable at once (its routes
// fail fast instead of waiting on a silent node).
func (s *Service) reachable(ctx context.Context, id string) (*store.Node, nodeapi.Service, error) {
	n, svc, err := s.holder(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if n.Liveness != store.NodeReady {
		return nil, nil, fmt.Errorf("sandbox %q: its node %q is %s: %w", id, n.ID, n.Liveness, errdefs.ErrUnavailable)
	}
	return n, svc, nil
}

func need(r sandbox.Resources) store.NodeResources {
	return store.NodeResources{VCPUs: int64(r.VCPUs), MemoryMB: r.MemoryMB}
}

// candidates returns the schedulable nodes with room for want, best first:
// K of them drawn at random and ordered by template held then free
// capacity, then the others as fallbacks.
func (s *Service) candidates(ctx context.Context, want store.NodeResources, buildID string) ([]*store.Node, error) {
	nodes, err := s.st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	var fit []*store.Node
	for _, n := range nodes {
		if n.Schedulable() && n.Capacity.Fits(n.Allocated, want) {
			fit = append(fit, n)
		}
	}
	rand.Shuffle(len(fit), func(i, j int) { fit[i], fit[j] = fit[j], fit[i] })
	k := min(s.cfg.K, len(fit))
	best := fit[:k]
	sort.SliceStable(best, func(i, j int) bool {
		hi, hj := best[i].HoldsTemplate(buildID), best[j].HoldsTemplate(buildID)
		if hi != hj {
			return hi
		}
		return free(best[i]) > free(best[j])
	})
	return fit, nil
}

// free is the node's free share: the smaller of its free CPU and memory
// fractions.
func free(n *store.Node) float64 {
	frac := func(alloc, cap int64) float64 {
		if cap <= 0 {
			return 0
		}
		return float64(cap-alloc) / float64(cap)
	}
	return min(frac(n.Allocated.VCPUs, n.Capacity.VCPUs), frac(n.Allocated.MemoryMB, n.Capacity.MemoryMB))
}

// Create implements nodeapi.Service: it reserves the sandbox's resources
// on the best candidate and asks that node, moving on to the next
// candidate when a node has no room or refuses.
func (s *Service) Create(ctx context.Context, req nodeapi.CreateRequest) (*nodeapi.Sandbox, error) {
	want := need(req.Resources)
	if len(req.Volumes) > 0 {
		return s.createOnVolumes(ctx, req, want)
	}
	cands, err := s.candidates(ctx, want, req.Template.BuildID)
	if err != nil {
		return nil, fmt.Errorf("place sandbox %q: %w", req.ID, err)
	}
	var refusals []error
	for _, n := range cands {
		log := s.log.With("sandbox_id", req.ID, "node_id", n.ID)
		if err := s.st.ReserveOnNode(ctx, n.ID, req.ID, want); err != nil {
			if !errdefs.IsExhausted(err) {
				return nil, fmt.Errorf("place sandbox %q: %w", req.ID, err)
			}
			refusals = append(refusals, err)
			s.m.refusals.Inc()
			continue // taken by another create since the listing
		}
		sb, err := s.client(n).Create(ctx, req)
		if err == nil {
			log.Info("sandbox placed")
			s.m.creates.WithLabelValues("placed").Inc()
			return ownProxy(n, sb), nil
		}
		s.release(context.WithoutCancel(ctx), req.ID)
		if errdefs.IsInvalid(err) || errdefs.IsAlreadyExists(err) || ctx.Err() != nil {
			return nil, err
		}
		log.Warn("node refused a create, trying the next", "error", err)
		s.m.refusals.Inc()
		refusals = append(refusals, fmt.Errorf("node %q: %w", n.ID, err))
	}
	s.m.creates.WithLabelValues("no_node").Inc()
	if len(refusals) == 0 {
		return nil, fmt.Errorf("place sandbox %q: no ready node has %d vCPUs and %d MiB free: %w", req.ID, want.VCPUs, want.MemoryMB, errdefs.ErrExhausted)
	}
	return nil, fmt.Errorf("place sandbox %q: every node refused: %w: %w", req.ID, errdefs.ErrExhausted, errors.Join(refusals...))
}

// release gives back sandbox id's reservation (a no-op without one).
func (s *Service) release(ctx context.Context, id string) {
	if _, err := s.st.ReleaseReservation(ctx, id); err != nil {
		s.log.Warn("release node reservation", "sandbox_id", id, "error", err)
	}
}

// Get implements nodeapi.Service.
func (s *Service) Get(ctx context.Context, id string) (*nodeapi.Sandbox, error) {
	n, svc, err := s.reachable(ctx, id)
	if err != nil {
		return nil, err
	}
	sb, err := svc.Get(ctx, id)
	return ownProxy(n, sb), err
}

// SetEndTime implements nodeapi.Service.
func (s *Service) SetEndTime(ctx context.Context, id string, endAt time.Time) error {
	_, svc, err := s.reachable(ctx, id)
	if err != nil {
		return err
	}
	return svc.SetEndTime(ctx, id, endAt)
}

// UpdateNetwork implements nodeapi.Service.
func (s *Service) UpdateNetwork(ctx context.Context, id string, policy sandbox.NetworkPolicy) error {
	_, svc, err := s.reachable(ctx, id)
	if err != nil {
		return err
	}
	return svc.UpdateNetwork(ctx, id, policy)
}

// Pause implements nodeapi.Service; a paused sandbox holds no CPU or
// memory, so its reservation is given back.
func (s *Service) Pause(ctx context.Context, id string, req nodeapi.PauseRequest) (*nodeapi.Sandbox, error) {
	_, svc, err := s.reachable(ctx, id)
	if err != nil {
		return nil, err
	}
	sb, err := svc.Pause(ctx, id, req)
	if err == nil || errdefs.IsNotFound(err) {
		s.release(context.WithoutCancel(ctx), id)
	}
	return sb, err
}

// Resume implements nodeapi.Service on the node that holds the snapshot,
// reserving the sandbox's resources there again (ErrExhausted when that
// node has no room or takes no placements).
func (s *Service) Resume(ctx context.Context, id string, req nodeapi.ResumeRequest) (*nodeapi.Sandbox, error) {
	n, svc, err := s.reachable(ctx, id)
	if err != nil {
		return nil, err
	}
	sb, err := s.st.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.st.ReserveOnNode(ctx, n.ID, id, need(sb.Spec.Resources)); err != nil {
		return nil, fmt.Errorf("resume sandbox %q on node %q: %w", id, n.ID, err)
	}
	out, err := svc.Resume(ctx, id, req)
	if err != nil {
		s.release(context.WithoutCancel(ctx), id)
	}
	return ownProxy(n, out), err
}

// Fork implements nodeapi.Service on the source's node, reserving each
// copy's resources there first; the copies the node could not hold are
// not asked for.
func (s *Service) Fork(ctx context.Context, id string, req nodeapi.ForkRequest) ([]*nodeapi.Sandbox, error) {
	n, svc, err := s.reachable(ctx, id)
	if err != nil {
		return nil, err
	}
	src, err := svc.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	want := need(src.Resources)
	var keep nodeapi.ForkRequest
	keep.EndAt = req.EndAt
	for i, fid := range req.IDs {
		if err := s.st.ReserveOnNode(ctx, n.ID, fid, want); err != nil {
			if !errdefs.IsExhausted(err) {
				return nil, err
			}
			continue
		}
		keep.IDs = append(keep.IDs, fid)
		if i < len(req.ExecutionIDs) {
			keep.ExecutionIDs = append(keep.ExecutionIDs, req.ExecutionIDs[i])
		}
		if i < len(req.EnvdAccessTokens) {
			keep.EnvdAccessTokens = append(keep.EnvdAccessTokens, req.EnvdAccessTokens[i])
		}
	}
	if len(keep.IDs) == 0 {
		return nil, fmt.Errorf("fork sandbox %q: node %q has no room for a copy: %w", id, n.ID, errdefs.ErrExhausted)
	}
	out, ferr := svc.Fork(ctx, id, keep)
	made := map[string]bool{}
	for _, sb := range out {
		made[sb.ID] = true
		ownProxy(n, sb)
	}
	for _, fid := range keep.IDs {
		if !made[fid] {
			s.release(context.WithoutCancel(ctx), fid)
		}
	}
	return out, ferr
}

// Kill implements nodeapi.Service. A lost node's sandboxes are gone: the
// kill is ErrNotFound without asking it.
func (s *Service) Kill(ctx context.Context, id string, reason sandbox.KillReason) error {
	return s.kill(ctx, id, func(svc nodeapi.Service) error { return svc.Kill(ctx, id, reason) })
}

// killAnywhere kills sandbox id, which the store has no row of (an orphan
// that a reconcile found on some node: the listing merges every node's),
// on every live node that runs it. Not found on any is ErrNotFound.
func (s *Service) killAnywhere(ctx context.Context, id string, call func(nodeapi.Service) error) error {
	nodes, err := s.liveNodes(ctx)
	if err != nil {
		return err
	}
	killed := false
	var errs []error
	for _, n := range nodes {
		err := call(s.client(n))
		switch {
		case err == nil:
			killed = true
		case !errdefs.IsNotFound(err):
			errs = append(errs, fmt.Errorf("node %q: %w", n.ID, err))
		}
	}
	switch {
	case killed:
		return nil
	case len(errs) > 0:
		return fmt.Errorf("sandbox %q (no store row): %w", id, errors.Join(errs...))
	}
	return fmt.Errorf("sandbox %q: on no node: %w", id, errdefs.ErrNotFound)
}

// KillExecution implements nodeapi.ExecutionKiller (a node without it is
// asked for a plain Kill).
func (s *Service) KillExecution(ctx context.Context, id, executionID string, reason sandbox.KillReason) error {
	return s.kill(ctx, id, func(svc nodeapi.Service) error {
		if ek, ok := svc.(nodeapi.ExecutionKiller); ok {
			return ek.KillExecution(ctx, id, executionID, reason)
		}
		return svc.Kill(ctx, id, reason)
	})
}

func (s *Service) kill(ctx context.Context, id string, call func(nodeapi.Service) error) error {
	n, svc, err := s.holder(ctx, id)
	if errdefs.IsNotFound(err) {
		if _, gerr := s.st.GetSandbox(ctx, id); errdefs.IsNotFound(gerr) {
			return s.killAnywhere(ctx, id, call)
		}
	}
	if err != nil {
		return err
	}
	if n.Liveness == store.NodeLost {
		err = fmt.Errorf("sandbox %q: its node %q is lost: %w", id, n.ID, errdefs.ErrNotFound)
	} else {
		err = call(svc)
	}
	if err == nil || errdefs.IsNotFound(err) {
		s.release(context.WithoutCancel(ctx), id)
	}
	return err
}

// Stats implements nodeapi.Service.
func (s *Service) Stats(ctx context.Context, id string) (*nodeapi.Stats, error) {
	_, svc, err := s.reachable(ctx, id)
	if err != nil {
		return nil, err
	}
	return svc.Stats(ctx, id)
}

// Metrics implements nodeapi.MetricsSource on the sandbox's node.
func (s *Service) Metrics(ctx context.Context, id string, start, end time.Time) ([]nodeapi.Stats, error) {
	_, svc, err := s.reachable(ctx, id)
	if err != nil {
		return nil, err
	}
	ms, ok := svc.(nodeapi.MetricsSource)
	if !ok {
		return nil, fmt.Errorf("sandbox %q metrics: %w", id, errdefs.ErrUnsupported)
	}
	return ms.Metrics(ctx, id, start, end)
}

// liveNodes returns the nodes that are not lost.
func (s *Service) liveNodes(ctx context.Context) ([]*store.Node, error) {
	nodes, err := s.st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := nodes[:0]
	for _, n := range nodes {
		if n.Liveness != store.NodeLost {
			out = append(out, n)
		}
	}
	return out, nil
}

// List implements nodeapi.Service: the sandboxes of every node that is
// not lost and answers. A node that does not answer is left out (logged):
// the lifecycle's reconcile then asks for its sandboxes one by one and
// leaves them as they are while it cannot tell.
func (s *Service) List(ctx context.Context) ([]*nodeapi.Sandbox, error) {
	nodes, err := s.liveNodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []*nodeapi.Sandbox
	for _, n := range nodes {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		sbs, err := s.client(n).List(cctx)
		cancel()
		if err != nil {
			s.log.Warn("list node", "node_id", n.ID, "error", err)
			continue
		}
		for _, sb := range sbs {
			out = append(out, ownProxy(n, sb))
		}
	}
	return out, nil
}

// Capabilities implements nodeapi.Service: what every node that answers
// can do (a feature is offered only when all of them have it).
func (s *Service) Capabilities(ctx context.Context) (nodeapi.Capabilities, error) {
	nodes, err := s.liveNodes(ctx)
	if err != nil {
		return nodeapi.Capabilities{}, err
	}
	out := nodeapi.Capabilities{Driver: "placement", MemoryCheckpoint: true, Freeze: true, Fork: true}
	seen := false
	for _, n := range nodes {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		c, err := s.client(n).Capabilities(cctx)
		cancel()
		if err != nil {
			continue
		}
		seen = true
		out.MemoryCheckpoint = out.MemoryCheckpoint && c.MemoryCheckpoint
		out.Freeze = out.Freeze && c.Freeze
		out.Fork = out.Fork && c.Fork
	}
	if !seen {
		return nodeapi.Capabilities{Driver: "placement"}, nil
	}
	return out, nil
}

// unreachable is the Service of a node whose RPC address it will not
// call (plain HTTP off loopback): every call fails with err.
type unreachable struct{ err error }

func (u unreachable) Create(context.Context, nodeapi.CreateRequest) (*nodeapi.Sandbox, error) {
	return nil, u.err
}
func (u unreachable) Get(context.Context, string) (*nodeapi.Sandbox, error) { return nil, u.err }
func (u unreachable) List(context.Context) ([]*nodeapi.Sandbox, error)      { return nil, u.err }
func (u unreachable) SetEndTime(context.Context, string, time.Time) error   { return u.err }
func (u unreachable) UpdateNetwork(context.Context, string, sandbox.NetworkPolicy) error {
	return u.err
}
func (u unreachable) Pause(context.Context, string, nodeapi.PauseRequest) (*nodeapi.Sandbox, error) {
	return nil, u.err
}
func (u unreachable) Resume(context.Context, string, nodeapi.ResumeRequest) (*nodeapi.Sandbox, error) {
	return nil, u.err
}
func (u unreachable) Fork(context.Context, string, nodeapi.ForkRequest) ([]*nodeapi.Sandbox, error) {
	return nil, u.err
}
func (u unreachable) Kill(context.Context, string, sandbox.KillReason) error { return u.err }
func (u unreachable) Stats(context.Context, string) (*nodeapi.Stats, error)  { return nil, u.err }
func (u unreachable) Watch(context.Context) (<-chan nodeapi.Event, error)    { return nil, u.err }
func (u unreachable) Capabilities(context.Context) (nodeapi.Capabilities, error) {
	return nodeapi.Capabilities{}, u.err
}
