package lifecycle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// readStore counts the sandbox reads made through it.
type readStore struct {
	*store.SQL
	lists, gets atomic.Int32
}

func (s *readStore) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	s.lists.Add(1)
	return s.SQL.ListSandboxes(ctx, f)
}

func (s *readStore) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	s.gets.Add(1)
	return s.SQL.GetSandbox(ctx, id)
}

// reads returns the reads made since the last call.
func (s *readStore) reads(last *[2]int32) (lists, gets int32) {
	l, g := s.lists.Load(), s.gets.Load()
	lists, gets = l-last[0], g-last[1]
	*last = [2]int32{l, g}
	return lists, gets
}

// TestSignedLookupReadsNoStore: finding the sandbox of a signed /files URL
// (plain-http mode, where the URL names none) reads the store once, not
// once per request: lookups with signatures nobody made cost no read, a
// change of one sandbox costs one read of its row, and each lookup tries
// only the running sandboxes and the paused ones that traffic may wake.
func TestSignedLookupReadsNoStore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sql := storetest.SQLite(t)
		st := &readStore{SQL: sql}
		h := start(t, st, fakenode.New(), func(c *lifecycle.Config) { c.SandboxChanges = sql.WatchSandboxes })
		synctest.Wait() // the feed is live
		ctx := context.Background()
		tokens := map[string]string{}
		for range 5 {
			sb := h.create(lifecycle.CreateParams{Timeout: time.Hour, Secure: true})
			tokens[sb.ID] = sb.Spec.EnvdAccessToken
		}
		h.create(lifecycle.CreateParams{Timeout: time.Hour}) // no token: never tried
		var tried atomic.Int32
		find := func(token string) string {
			t.Helper()
			id, err := h.m.SandboxBySignature(ctx, func(tok string) bool { tried.Add(1); return tok == token })
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		var last [2]int32
		find("warm-up")
		st.reads(&last)
		tried.Store(0)
		for range 50 {
			if id := find("nobody's token"); id != "" {
				t.Fatalf("a signature nobody made found %s", id)
			}
		}
		if l, g := st.reads(&last); l != 0 || g != 0 {
			t.Fatalf("50 signed lookups read the store %d times (%d lists, %d gets), want 0", l+g, l, g)
		}
		if n := tried.Load(); n != 50*5 {
			t.Fatalf("50 lookups tried %d tokens, want 250 (the 5 secured sandboxes each)", n)
		}
		for id, tok := range tokens {
			if got := find(tok); got != id {
				t.Fatalf("token of %s found %q", id, got)
			}
		}

		// A new sandbox: one read of its row, then found.
		sb := h.create(lifecycle.CreateParams{Timeout: time.Hour, Secure: true, AutoResume: true})
		st.reads(&last)
		if got := find(sb.Spec.EnvdAccessToken); got != sb.ID {
			t.Fatalf("the new sandbox's token found %q", got)
		}
		if l, g := st.reads(&last); l != 0 || g > 2 {
			t.Fatalf("finding a new sandbox read the store %d lists, %d gets; want its row only", l, g)
		}
		// Paused with its memory and auto-resume: still reachable (its
		// signed URL wakes it). Paused without auto-resume, or killed: not.
		if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
			t.Fatal(err)
		}
		if got := find(sb.Spec.EnvdAccessToken); got != sb.ID {
			t.Fatalf("a paused sandbox that traffic wakes: found %q", got)
		}
		var first string
		for id := range tokens {
			first = id
			break
		}
		if err := h.m.Pause(ctx, "team", first, true); err != nil {
			t.Fatal(err)
		}
		if got := find(tokens[first]); got != "" {
			t.Fatalf("a paused sandbox without auto-resume: found %q", got)
		}
		if err := h.m.Kill(ctx, "team", sb.ID, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		if got := find(sb.Spec.EnvdAccessToken); got != "" {
			t.Fatalf("a killed sandbox: found %q", got)
		}
		if l, _ := st.reads(&last); l != 0 {
			t.Fatalf("following changes listed the store %d times, want 0", l)
		}
	})
}

// TestSignedLookupWithoutFeed: without a change feed the lookup reads the
// store each time, and still finds the sandbox.
func TestSignedLookupWithoutFeed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := &readStore{SQL: storetest.SQLite(t)}
		h := start(t, st, fakenode.New(), nil)
		sb := h.create(lifecycle.CreateParams{Timeout: time.Hour, Secure: true})
		id, err := h.m.SandboxBySignature(context.Background(), func(tok string) bool { return tok == sb.Spec.EnvdAccessToken })
		if err != nil || id != sb.ID {
			t.Fatalf("found %q, %v; want %s", id, err, sb.ID)
		}
	})
}

// TestSignedLookupAcrossReplicas: two Managers over one Postgres database;
// a sandbox created and killed through one is found, then no longer
// found, by the other's signature index (LISTEN/NOTIFY).
func TestSignedLookupAcrossReplicas(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	sa, sb := storetest.OpenPostgres(t, dsn), storetest.OpenPostgres(t, dsn)
	n := fakenode.New()
	feed := func(st *store.SQL) func(*lifecycle.Config) {
		return func(c *lifecycle.Config) { c.SandboxChanges = st.WatchSandboxes }
	}
	a, b := startReplica(t, sa, n, feed(sa)).m, startReplica(t, sb, n, feed(sb)).m
	ctx := context.Background()
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	s, err := a.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour, Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	find := func() string {
		id, err := b.SandboxBySignature(ctx, func(tok string) bool { return tok == s.Spec.EnvdAccessToken })
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	until("b never found the sandbox created by a", func() bool { return find() == s.ID })
	if err := a.Kill(ctx, "team", s.ID, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	until("b still finds the sandbox a killed", func() bool { return find() == "" })
}
