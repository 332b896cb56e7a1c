package lifecycle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// sampledNode is a fake node that keeps samples (nodeapi.MetricsSource).
type sampledNode struct {
	*fakenode.Node
	samples map[string][]nodeapi.Stats
}

func (n *sampledNode) Metrics(_ context.Context, id string, start, end time.Time) ([]nodeapi.Stats, error) {
	all, ok := n.samples[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	var out []nodeapi.Stats
	for _, s := range all {
		if (start.IsZero() || !s.At.Before(start)) && (end.IsZero() || !s.At.After(end)) {
			out = append(out, s)
		}
	}
	return out, nil
}

func TestMetricsFromSamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := &sampledNode{Node: fakenode.New(), samples: map[string][]nodeapi.Stats{}}
	m, err := lifecycle.New(lifecycle.Config{Store: storetest.SQLite(t), Node: n})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	n.samples[sb.ID] = []nodeapi.Stats{{At: t0, CPUUsedPct: 1}, {At: t0.Add(5 * time.Second), CPUUsedPct: 2}, {At: t0.Add(10 * time.Second), CPUUsedPct: 3}}

	for _, tc := range []struct {
		name       string
		team       string
		start, end time.Time
		want       []float64
		wantErr    func(error) bool
	}{
		{"all", "team", time.Time{}, time.Time{}, []float64{1, 2, 3}, nil},
		{"window", "team", t0.Add(time.Second), t0.Add(6 * time.Second), []float64{2}, nil},
		{"other team", "other", time.Time{}, time.Time{}, nil, errdefs.IsNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := m.Metrics(ctx, tc.team, sb.ID, tc.start, tc.end)
			if tc.wantErr != nil {
				if !tc.wantErr(err) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var cpu []float64
			for _, s := range got {
				cpu = append(cpu, s.CPUUsedPct)
			}
			if fmt.Sprint(cpu) != fmt.Sprint(tc.want) {
				t.Errorf("samples %v, want %v", cpu, tc.want)
			}
		})
	}
	t.Run("latest", func(t *testing.T) {
		st, err := m.LatestMetric(ctx, "team", sb.ID)
		if err != nil || st == nil || st.CPUUsedPct != 3 {
			t.Fatalf("latest = %+v, %v; want the 10 s sample", st, err)
		}
	})
	t.Run("node forgot the sandbox", func(t *testing.T) {
		delete(n.samples, sb.ID)
		got, err := m.Metrics(ctx, "team", sb.ID, time.Time{}, time.Time{})
		if err != nil || len(got) != 0 {
			t.Fatalf("metrics = %v, %v; want none", got, err)
		}
	})
}

// unsampledNode answers Metrics as a remote node that keeps no samples
// does through the RPC client: ErrUnsupported.
type unsampledNode struct{ *fakenode.Node }

func (unsampledNode) Metrics(_ context.Context, id string, _, _ time.Time) ([]nodeapi.Stats, error) {
	return nil, fmt.Errorf("sandbox metrics: %w", errdefs.ErrUnsupported)
}

// TestMetricsUnsupportedFallsBack: the manager gives the current reading
// of a node that keeps no samples, as for a node that is no MetricsSource.
func TestMetricsUnsupportedFallsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := lifecycle.New(lifecycle.Config{Store: storetest.SQLite(t), Node: unsampledNode{fakenode.New()}})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Metrics(ctx, "team", sb.ID, time.Time{}, time.Time{})
	if err != nil {
		t.Fatalf("Metrics: %v", err)
	}
	if len(got) != 1 || got[0].At.IsZero() {
		t.Errorf("Metrics: %+v, want the one current reading", got)
	}
}
