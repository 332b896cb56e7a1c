package bench

import (
	"context"
	"fmt"
	"math"
	"time"
)

// density starts idle sandboxes one after another until the host's
// available memory dropped by the budget, the maximum count is reached or
// a start fails, then reports host memory per sandbox.
func (r *Runner) density(ctx context.Context) {
	p := r.cfg.Plan
	if p.DensityMax <= 0 {
		return
	}
	d := &Density{BudgetMiB: p.DensityBudgetMiB, MaxCount: p.DensityMax}
	r.run.Density = d
	before, err := memAvailable()
	if err != nil {
		d.StopReason = "host memory unreadable: " + err.Error()
		return
	}
	cgBefore, cgErr := cgroupMemory(r.cfg.CgroupRoot)
	var drop float64
	// MemAvailable after 0, 1, 2 … sandboxes: the slope of a least-squares
	// line through them is less sensitive to the other loads of a shared
	// host than the difference of two readings.
	avail := []float64{before}
	d.StopReason = fmt.Sprintf("max count %d", p.DensityMax)
	for d.Started < p.DensityMax {
		if ctx.Err() != nil {
			d.StopReason = "interrupted"
			break
		}
		// A started sandbox counts once it answers a command.
		if _, err := r.interactive(ctx, false); err != nil {
			r.note("density", err)
			d.StopReason = "start failed: " + err.Error()
			break
		}
		d.Started++
		now, err := memAvailable()
		if err != nil {
			d.StopReason = "host memory unreadable: " + err.Error()
			break
		}
		avail = append(avail, now)
		drop = before - now
		if drop >= float64(p.DensityBudgetMiB) {
			d.StopReason = fmt.Sprintf("memory budget %d MiB", p.DensityBudgetMiB)
			break
		}
	}
	if d.Started == 0 {
		return
	}
	// Let the idle sandboxes settle before the final reading.
	settle(ctx, 2*time.Second)
	if now, err := memAvailable(); err == nil {
		avail[len(avail)-1] = now
	}
	d.HostMiBPerSandbox = round1(-slope(avail))
	if cgErr == nil {
		if cg, err := cgroupMemory(r.cfg.CgroupRoot); err == nil {
			d.CgroupMiBPerSandbox = round1((cg - cgBefore) / float64(d.Started))
		}
	}
	r.killAll(ctx)
}

// slope returns the least-squares slope of ys over xs = 0, 1, 2 … (0 for
// fewer than two points).
func slope(ys []float64) float64 {
	n := float64(len(ys))
	if len(ys) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i, y := range ys {
		x := float64(i)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// settle waits for d or until ctx ends (a measurement pause, not a
// synchronisation).
func settle(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
