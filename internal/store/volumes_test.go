package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/store"
)

func TestVolumes(t *testing.T) {
	t.Parallel()
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("names and quotas", func(t *testing.T) { testVolumeNamesAndQuotas(t, open(t)) })
			t.Run("concurrent creates keep the quota", func(t *testing.T) { testVolumeQuotaRace(t, open(t)) })
			t.Run("states and team delete", func(t *testing.T) { testVolumeStates(t, open(t)) })
		})
	}
}

func volumeTeams(t *testing.T, s store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := s.CreateTeam(context.Background(), &store.Team{ID: id, Name: id}); err != nil {
			t.Fatal(err)
		}
	}
}

func testVolumeNamesAndQuotas(t *testing.T, s *store.SQL) {
	ctx := context.Background()
	volumeTeams(t, s, "team-a", "team-b")
	q := store.VolumeQuota{MaxVolumes: 2, MaxStorageMB: 100}
	v := &store.Volume{ID: "v1", TeamID: "team-a", Name: "data", NodeID: "n1", SizeMB: 60, Token: "tok1"}
	if err := s.CreateVolume(ctx, v, q); err != nil {
		t.Fatal(err)
	}
	if v.State != store.VolumeCreating {
		t.Fatalf("a new volume is %q, want creating", v.State)
	}
	// Names are unique within a team, not across teams.
	err := s.CreateVolume(ctx, &store.Volume{ID: "v2", TeamID: "team-a", Name: "data", SizeMB: 1, Token: "t"}, q)
	if !errdefs.IsAlreadyExists(err) || errhttp.Message(err) != `a volume named "data" already exists` {
		t.Fatalf("same name in the same team: %v (%q)", err, errhttp.Message(err))
	}
	if err := s.CreateVolume(ctx, &store.Volume{ID: "v3", TeamID: "team-b", Name: "data", SizeMB: 60, Token: "t"}, q); err != nil {
		t.Fatalf("same name in another team: %v", err)
	}
	// The storage quota counts the sizes of the team's volumes only.
	err = s.CreateVolume(ctx, &store.Volume{ID: "v4", TeamID: "team-a", Name: "big", SizeMB: 41, Token: "t"}, q)
	if !errdefs.IsExhausted(err) {
		t.Fatalf("over the storage quota: %v", err)
	}
	if err := s.CreateVolume(ctx, &store.Volume{ID: "v5", TeamID: "team-a", Name: "fits", SizeMB: 40, Token: "t"}, q); err != nil {
		t.Fatalf("within the storage quota: %v", err)
	}
	err = s.CreateVolume(ctx, &store.Volume{ID: "v6", TeamID: "team-a", Name: "third", SizeMB: 1, Token: "t"}, store.VolumeQuota{MaxVolumes: 2})
	if !errdefs.IsExhausted(err) {
		t.Fatalf("over the count: %v", err)
	}
	if err := s.CreateVolume(ctx, &store.Volume{ID: "v7", TeamID: "no-team", Name: "x", SizeMB: 1, Token: "t"}, q); !errdefs.IsNotFound(err) {
		t.Fatalf("a volume of no team: %v", err)
	}
	if _, err := s.GetVolumeByName(ctx, "team-b", "fits"); !errdefs.IsNotFound(err) {
		t.Fatalf("another team's volume by name: %v", err)
	}
	got, err := s.GetVolumeByName(ctx, "team-a", "data")
	if err != nil || got.ID != "v1" || got.Token != "tok1" || got.SizeMB != 60 || got.NodeID != "n1" {
		t.Fatalf("by name: %+v, %v", got, err)
	}
	list, err := s.ListVolumes(ctx, store.VolumeFilter{TeamID: "team-a"})
	if err != nil || len(list) != 2 || list[0].ID != "v1" || list[1].ID != "v5" {
		t.Fatalf("list of team-a: %v, %v", list, err)
	}
	if list, _ := s.ListVolumes(ctx, store.VolumeFilter{NodeID: "n1"}); len(list) != 1 {
		t.Fatalf("list by node: %v", list)
	}
}

func testVolumeQuotaRace(t *testing.T, s *store.SQL) {
	ctx := context.Background()
	volumeTeams(t, s, "team-a")
	q := store.VolumeQuota{MaxVolumes: 3}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			errs[i] = s.CreateVolume(ctx, &store.Volume{ID: fmt.Sprint("v", i), TeamID: "team-a", Name: fmt.Sprint("n", i), SizeMB: 1, Token: "t"}, q)
		})
	}
	wg.Wait()
	made := 0
	for _, err := range errs {
		switch {
		case err == nil:
			made++
		case !errdefs.IsExhausted(err):
			t.Fatalf("concurrent create: %v", err)
		}
	}
	if made != 3 {
		t.Fatalf("%d concurrent creates got through a limit of 3", made)
	}
}

func testVolumeStates(t *testing.T, s *store.SQL) {
	ctx := context.Background()
	volumeTeams(t, s, "team-a")
	if err := s.CreateVolume(ctx, &store.Volume{ID: "v1", TeamID: "team-a", Name: "data", SizeMB: 1, Token: "t"}, store.VolumeQuota{}); err != nil {
		t.Fatal(err)
	}
	v, err := s.UpdateVolume(ctx, "v1", func(v *store.Volume) error {
		v.State, v.NodeID, v.Name = store.VolumeReady, "n2", "renamed"
		return nil
	})
	if err != nil || v.State != store.VolumeReady {
		t.Fatalf("update: %+v, %v", v, err)
	}
	if v, _ := s.GetVolume(ctx, "v1"); v.State != store.VolumeReady || v.NodeID != "n2" || v.Name != "data" {
		t.Fatalf("after update: %+v (the name stays)", v)
	}
	if ready, _ := s.ListVolumes(ctx, store.VolumeFilter{States: []store.VolumeState{store.VolumeReady}}); len(ready) != 1 {
		t.Fatalf("ready volumes: %v", ready)
	}
	// A team with a volume cannot be deleted: its data is on a node.
	if err := s.DeleteTeam(ctx, "team-a"); !errdefs.IsConflict(err) {
		t.Fatalf("delete of a team with a volume: %v", err)
	}
	if err := s.DeleteVolume(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(ctx, "v1"); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	if err := s.DeleteTeam(ctx, "team-a"); err != nil {
		t.Fatalf("delete of a team without volumes: %v", err)
	}
}
