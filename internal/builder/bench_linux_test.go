package builder

import (
	"os"
	"strconv"
	"testing"
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
