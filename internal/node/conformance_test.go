package node_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/nodeapi/nodeapitest"
	"github.com/warren-sandbox/warren/internal/nodebuild/nodebuildtest"
)

// TestConformance runs the node contract's suite against the agent over
// the fake driver and in-memory host pieces, its sandbox snapshots kept in
// a catalog of its own as `warren node` keeps them.
func TestConformance(t *testing.T) {
	nodeapitest.Run(t, nodeapitest.Harness{New: func(t *testing.T) nodeapitest.Node {
		e := newEnv(t, fake.Config{})
		a := e.start()
		tmpl := createReq("x").Template
		tmpl.RootFS = t.TempDir() // a snapshot's artifact is a tar of it
		if err := os.WriteFile(filepath.Join(tmpl.RootFS, "hi"), []byte("hi\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ss := nodebuildtest.New(t, a, a)
		return nodeapitest.Node{
			Service:   a,
			Template:  tmpl,
			Snapshots: ss,
			Resolve:   ss.Resolve,
			Exit: func(t *testing.T, id string) {
				if err := e.fake.Exit(id, 0); err != nil {
					t.Fatalf("exit %q: %v", id, err)
				}
			},
		}
	}})
}
