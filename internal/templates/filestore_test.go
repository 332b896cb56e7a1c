package templates_test

import (
	"testing"

	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/templates/templatestest"
)

func TestFileStore(t *testing.T) {
	t.Parallel()
	templatestest.Run(t, func(t *testing.T) (a, b templates.Store) {
		s, err := templates.NewFileStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s, s
	})
}
