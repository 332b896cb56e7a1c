package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/warren-sandbox/warren/internal/atomicfile"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Pool configuration survives an agent restart: every SetPool rewrites
// DataDir/pools.json, and New sets the recorded pools again once the
// sandboxes are recovered, so the pools refill without the control plane
// having to ask again. Members themselves are not kept (see pool.go).

const (
	poolsFile    = "pools.json"
	poolsVersion = 1
)

type poolsRecord struct {
	Version int          `json:"version"`
	Pools   []poolConfig `json:"pools"`
}

type poolConfig struct {
	Template  nodeapi.Template  `json:"template"`
	Resources sandbox.Resources `json:"resources"`
	Size      int               `json:"size"`
}

// savePools writes the current pool configuration, under the pools'
// saveMu so that an older configuration never overwrites a newer one.
func (a *Agent) savePools() error {
	a.pools.saveMu.Lock()
	defer a.pools.saveMu.Unlock()
	rec := poolsRecord{Version: poolsVersion, Pools: a.pools.config()}
	sort.Slice(rec.Pools, func(i, j int) bool { return rec.Pools[i].Template.ID < rec.Pools[j].Template.ID })
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(a.cfg.DataDir, poolsFile), b, 0o600); err != nil {
		return fmt.Errorf("warm pools: write %s: %w", poolsFile, err)
	}
	return nil
}

// loadPools sets the pools recorded by an earlier agent. A pool that can no
// longer be set (its template is gone from this node) is logged and dropped.
func (a *Agent) loadPools(ctx context.Context) error {
	b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, poolsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("warm pools: %w", err)
	}
	var rec poolsRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("warm pools: %s: %w", poolsFile, err)
	}
	if rec.Version > poolsVersion {
		return fmt.Errorf("warm pools: %s has version %d, newer than this agent's %d", poolsFile, rec.Version, poolsVersion)
	}
	for _, p := range rec.Pools {
		if err := a.SetPool(ctx, p.Template, p.Resources, p.Size); err != nil {
			a.log.Warn("warm pool not restored", "template_id", p.Template.ID, "error", err)
		}
	}
	return nil
}
