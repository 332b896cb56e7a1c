package volumes_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/volumes"
)

// node is a node's volume service that answers CreateVolume with create
// and DeleteVolume with del (nil: success), recording the IDs asked.
type node struct {
	nodeapi.VolumeService // the content calls: not used here
	mu                    sync.Mutex
	create, del           error
	created, deleted      []string
}

func (n *node) CreateVolume(_ context.Context, spec nodeapi.VolumeSpec) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.created = append(n.created, spec.ID)
	return n.create
}

func (n *node) DeleteVolume(_ context.Context, _, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deleted = append(n.deleted, id)
	return n.del
}

type nodes struct {
	order []string
	by    map[string]*node
	down  map[string]bool
}

func (ns *nodes) VolumeCandidates(context.Context, int64) ([]string, error) { return ns.order, nil }
func (ns *nodes) VolumeNode(_ context.Context, id string) (nodeapi.VolumeService, error) {
	if ns.down[id] {
		return nil, fmt.Errorf("node %q: %w", id, errdefs.ErrUnavailable)
	}
	n, ok := ns.by[id]
	if !ok {
		return nil, fmt.Errorf("node %q: %w", id, errdefs.ErrNotFound)
	}
	return n, nil
}

func newService(t *testing.T, ns *nodes) (*volumes.Service, *store.SQL) {
	t.Helper()
	st := storetest.SQLite(t)
	if err := st.CreateTeam(context.Background(), &store.Team{ID: "t1", Name: "t1"}); err != nil {
		t.Fatal(err)
	}
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: fakenode.New()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := volumes.New(volumes.Config{Store: st, Nodes: ns, Lifecycle: lc, StaleAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

var lim = volumes.Limits{MaxVolumes: 10, MaxVolumeSizeMB: 100, MaxVolumeStorageMB: 1000}

func TestCreateTriesTheNextNode(t *testing.T) {
	full, ok := &node{create: fmt.Errorf("disk: %w", errdefs.ErrExhausted)}, &node{}
	ns := &nodes{order: []string{"full", "ok"}, by: map[string]*node{"full": full, "ok": ok}}
	s, st := newService(t, ns)
	v, err := s.Create(context.Background(), "t1", "data", 0, lim)
	if err != nil {
		t.Fatal(err)
	}
	if v.NodeID != "ok" || v.State != store.VolumeReady || v.SizeMB != 100 {
		t.Fatalf("created: %+v", v)
	}
	if got, _ := st.GetVolume(context.Background(), v.ID); got.NodeID != "ok" {
		t.Fatalf("recorded on %q", got.NodeID)
	}
	ok.create = fmt.Errorf("disk: %w", errdefs.ErrExhausted)
	_, err = s.Create(context.Background(), "t1", "more", 0, lim)
	if !errdefs.IsExhausted(err) || errhttp.Message(err) != "no node can hold a volume of 100 MiB now" {
		t.Fatalf("no node takes it: %v (%q)", err, errhttp.Message(err))
	}
	if _, err := st.GetVolumeByName(context.Background(), "t1", "more"); !errdefs.IsNotFound(err) {
		t.Fatalf("a refused volume keeps its row: %v", err)
	}
	// A node that fails otherwise: the create is undone there too.
	ok.create = fmt.Errorf("mkfs: %w", errdefs.ErrInvalid)
	if _, err := s.Create(context.Background(), "t1", "bad", 0, lim); !errdefs.IsInvalid(err) {
		t.Fatalf("a failing node: %v", err)
	}
	if len(ok.deleted) != 1 {
		t.Fatalf("the failed create was not undone on its node: %v", ok.deleted)
	}
}

func TestReconcileFinishesHalfDoneVolumes(t *testing.T) {
	n := &node{}
	ns := &nodes{order: []string{"n1"}, by: map[string]*node{"n1": n}}
	_, st := newService(t, ns)
	ctx := context.Background()
	for _, v := range []*store.Volume{
		{ID: "creating", Name: "a", State: store.VolumeCreating},
		{ID: "deleting", Name: "b", State: store.VolumeDeleting},
		{ID: "ready", Name: "c", State: store.VolumeReady},
	} {
		v.TeamID, v.NodeID, v.SizeMB, v.Token = "t1", "n1", 1, "t"
		if err := st.CreateVolume(ctx, v, store.VolumeQuota{}); err != nil {
			t.Fatal(err)
		}
	}
	at := func(d time.Duration) *volumes.Service {
		s, err := volumes.New(volumes.Config{Store: st, Nodes: ns, Lifecycle: mustLifecycle(t, st), StaleAfter: time.Hour,
			Now: func() time.Time { return time.Now().Add(d) }})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// A create or a delete in flight is left to its caller.
	if err := at(0).Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if left, _ := st.ListVolumes(ctx, store.VolumeFilter{}); len(left) != 3 || len(n.deleted) != 0 {
		t.Fatalf("a reconcile touched fresh rows: %v, node deleted %v", left, n.deleted)
	}
	if err := at(2 * time.Hour).Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	left, _ := st.ListVolumes(ctx, store.VolumeFilter{})
	if len(left) != 1 || left[0].ID != "ready" || fmt.Sprint(n.deleted) != "[creating deleting]" {
		t.Fatalf("after reconcile: %v left, node deleted %v", left, n.deleted)
	}
}

func mustLifecycle(t *testing.T, st *store.SQL) *lifecycle.Manager {
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: fakenode.New()})
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

func TestDestroyOnAnUnreachableNode(t *testing.T) {
	n := &node{}
	ns := &nodes{order: []string{"n1"}, by: map[string]*node{"n1": n}, down: map[string]bool{}}
	s, st := newService(t, ns)
	ctx := context.Background()
	v, err := s.Create(ctx, "t1", "data", 0, lim)
	if err != nil {
		t.Fatal(err)
	}
	ns.down["n1"] = true
	err = s.Destroy(ctx, "t1", v.ID, false)
	if !errdefs.IsUnavailable(err) || errhttp.Message(err) != `the node that holds volume "data" cannot be reached; try again, or destroy it with force=true to forget it` {
		t.Fatalf("destroy on an unreachable node: %v (%q)", err, errhttp.Message(err))
	}
	if _, err := s.Get(ctx, "t1", v.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("a volume being destroyed is shown: %v", err)
	}
	if err := s.Destroy(ctx, "t1", v.ID, true); err != nil {
		t.Fatalf("forced destroy on an unreachable node: %v", err)
	}
	if _, err := st.GetVolume(ctx, v.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("the forgotten volume's row: %v", err)
	}
	if _, _, err := s.Content(ctx, v.ID, v.Token); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("content of a destroyed volume: %v", err)
	}
}
