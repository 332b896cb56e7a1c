package testenv

import (
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	t.Parallel()
	a, b := Name("wstr-"), Name("wstr-")
	if a == b || !strings.HasPrefix(a, "wstr-") || len(a) != len("wstr-")+8 {
		t.Fatalf("Name: %q %q", a, b)
	}
}

func TestFileSkipsOrFails(t *testing.T) {
	t.Setenv("WARREN_TESTENV_NOPE", "/nonexistent/wstr")
	t.Setenv("CI", "")
	ran := false
	t.Run("missing", func(t *testing.T) {
		File(t, "WARREN_TESTENV_NOPE", "a file")
		ran = true
	})
	if ran {
		t.Fatal("File of a missing file did not stop the test")
	}
}

// TestLoggerAfterEnd: a log line after the test ended is dropped, not a
// panic.
func TestLoggerAfterEnd(t *testing.T) {
	t.Parallel()
	var log = func() func(string) {
		var f func(string)
		t.Run("inner", func(t *testing.T) {
			l := Logger(t)
			l.Info("during the test")
			f = func(s string) { l.Info(s) }
		})
		return f
	}()
	log("after the test")
}
