package placement_test

import (
	"context"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store"
)

// TestPlacementByVolume: a sandbox that mounts a volume goes to the node
// that holds it, and nowhere else: when that node has no room, takes no
// placements or volumes of two nodes are asked for, the create is refused
// with an error that says so.
func TestPlacementByVolume(t *testing.T) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			ctx := context.Background()
			f := fleet{}
			register(t, st, f, "big", 16, 32768) // placement prefers the node with room...
			small := register(t, st, f, "small", 1, 1024)
			register(t, st, f, "other", 16, 32768)
			if err := st.CreateTeam(ctx, &store.Team{ID: "t", Name: "t"}); err != nil {
				t.Fatal(err)
			}
			for _, v := range []*store.Volume{
				{ID: "vs", Name: "on-small", NodeID: "small"},
				{ID: "vo", Name: "on-other", NodeID: "other"},
			} {
				v.TeamID, v.SizeMB, v.Token, v.State = "t", 1, "tok", store.VolumeReady
				if err := st.CreateVolume(ctx, v, store.VolumeQuota{}); err != nil {
					t.Fatal(err)
				}
			}
			p := newPlacement(t, st, f)
			req := createReq("sb1")
			req.Volumes = []nodeapi.VolumeMount{{ID: "vs", Path: "/mnt"}}
			if _, err := p.Create(ctx, req); err != nil {
				t.Fatal(err)
			}
			if !onNode(t, small)["sb1"] {
				t.Fatal("a sandbox with a volume was not placed on the volume's node")
			}
			// ...but the volume's node is full now.
			req.ID = "sb2"
			_, err := p.Create(ctx, req)
			if !errdefs.IsExhausted(err) || !strings.Contains(errhttp.Message(err), `the node that holds volume "on-small" has no room`) {
				t.Fatalf("create on a full volume node: %v (%q)", err, errhttp.Message(err))
			}
			req.ID, req.Volumes = "sb3", []nodeapi.VolumeMount{{ID: "vs", Path: "/a"}, {ID: "vo", Path: "/b"}}
			if _, err := p.Create(ctx, req); !errdefs.IsInvalid(err) || !strings.Contains(errhttp.Message(err), "different nodes") {
				t.Fatalf("volumes of two nodes: %v", err)
			}
			if err := st.SetNodeAdminStatus(ctx, "other", store.NodeDraining); err != nil {
				t.Fatal(err)
			}
			req.ID, req.Volumes = "sb4", []nodeapi.VolumeMount{{ID: "vo", Path: "/b"}}
			if _, err := p.Create(ctx, req); !errdefs.IsExhausted(err) || !strings.Contains(errhttp.Message(err), "takes no new sandboxes") {
				t.Fatalf("create on a draining volume node: %v (%q)", err, errhttp.Message(err))
			}
			// New volumes go to the nodes that hold the fewest, among those
			// taking placements.
			cands, err := p.VolumeCandidates(ctx, 1)
			if err != nil || len(cands) != 2 || cands[0] != "big" || cands[1] != "small" {
				t.Fatalf("volume candidates: %v, %v", cands, err)
			}
			if _, err := p.VolumeNode(ctx, "nope"); !errdefs.IsNotFound(err) {
				t.Fatalf("volume node of an unknown node: %v", err)
			}
		})
	}
}
