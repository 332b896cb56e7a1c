package builder

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder/driverrun"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/runc"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/netslot/netslottest"
)

// BenchmarkBuild measures a five-step build from the base template, with
// every layer cached (the common rebuild) and without the cache.
func BenchmarkBuild(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	for _, force := range []bool{false, true} {
		b.Run("force="+strconv.FormatBool(force), func(b *testing.B) {
			f := newFixture(b, tinyRootFS(b))
			spec := Spec{FromTemplate: "base", Force: force, Steps: []Step{
				{Type: StepEnv, Args: []string{"A", "1"}},
				{Type: StepWorkdir, Args: []string{"/app"}},
				{Type: StepRun, Args: []string{"echo $A > /app/a"}},
				{Type: StepUser, Args: []string{"app"}},
				{Type: StepRun, Args: []string{"echo hi > $HOME/hi"}},
			}}
			i := 0
			for b.Loop() {
				i++
				if _, err := f.build(b, "team", "bench-"+strconv.Itoa(i), spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuildRunners measures an uncached build of three RUN steps with
// each runner: a chroot (no isolation, the floor), and driverrun with a
// network slot per build sandbox over the runc driver (`--driver runc`)
// and over the runsc driver (what warren serve uses by default). Each
// step is one build sandbox: start, exec, stop.
func BenchmarkBuildRunners(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	runscBin, envd := os.Getenv("WARREN_RUNSC"), os.Getenv("WARREN_ENVD")
	spec := Spec{FromTemplate: "base", Force: true, Steps: []Step{
		{Type: StepRun, Args: []string{"echo one > /one"}},
		{Type: StepRun, Args: []string{"echo two > /two"}},
		{Type: StepRun, Args: []string{"cat /one /two > /three"}},
	}}
	overDriver := func(b *testing.B, d driver.Driver) Runner {
		pool, _ := netslottest.New(b)
		return withNetwork{driverrun.Runner{
			Driver: d, Init: envd, InitArgs: []string{"-listen", "127.0.0.1", "-no-port-forward"},
			ResolvConf: "nameserver 127.0.0.1\n",
			NetNS: func(ctx context.Context, id string) (string, func(), error) {
				s, err := pool.Acquire(ctx, id, netslot.Policy{Internet: true})
				if err != nil {
					return "", nil, err
				}
				return s.NetNSPath, func() { pool.Release(context.Background(), s) }, nil
			},
		}}
	}
	runners := []struct {
		name string
		make func(b *testing.B) Runner
	}{
		{"chroot", func(*testing.B) Runner { return ChrootRunner{} }},
		{"runc-slot", func(b *testing.B) Runner {
			runcBin, err := exec.LookPath("runc")
			if err != nil || envd == "" {
				b.Skip("runc and WARREN_ENVD are needed (make build)")
			}
			d, err := runc.New(runc.Config{Path: runcBin, StateDir: filepath.Join(b.TempDir(), "runc"), CgroupRoot: "/" + testCgroupRoot(b)})
			if err != nil {
				b.Fatal(err)
			}
			return overDriver(b, d)
		}},
		{"runsc-slot", func(b *testing.B) Runner {
			if runscBin == "" || envd == "" {
				b.Skip("WARREN_RUNSC and WARREN_ENVD are needed (make build)")
			}
			d, err := runsc.New(runsc.Config{Path: runscBin, StateDir: filepath.Join(b.TempDir(), "runsc"), CgroupRoot: "/" + testCgroupRoot(b)})
			if err != nil {
				b.Fatal(err)
			}
			return overDriver(b, d)
		}},
	}
	for _, r := range runners {
		b.Run(r.name, func(b *testing.B) {
			f := newFixtureWith(b, tinyRootFS(b), r.make(b))
			i := 0
			for b.Loop() {
				i++
				if bd, err := f.build(b, "team", "bench-"+strconv.Itoa(i), spec); err != nil {
					b.Fatalf("%v\n%s", err, f.logs(b, bd.ID))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/float64(len(spec.Steps)), "ms/step")
		})
	}
}

// withNetwork asks every build sandbox for network, as warren serve does.
type withNetwork struct{ Runner }

func (w withNetwork) Start(ctx context.Context, req SandboxRequest) (BuildSandbox, error) {
	req.Network = true
	return w.Runner.Start(ctx, req)
}
