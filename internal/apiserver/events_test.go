package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/events"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

// newEventsEnv is newEnv with the events and webhooks routes mounted.
func newEventsEnv(t *testing.T) (*env, *int) {
	t.Helper()
	ctx := context.Background()
	st := storetest.SQLite(t)
	n := fakenode.New()
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { lc.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	e := &env{t: t, st: st, node: n, lc: lc}
	for _, tm := range []string{"t1", "t2"} {
		if err := st.CreateTeam(ctx, &store.Team{ID: tm, Name: tm}); err != nil {
			t.Fatal(err)
		}
	}
	for tid, dst := range map[string]*string{"t1": &e.key1, "t2": &e.key2} {
		k, _, err := apiserver.AddKey(ctx, st, tid, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		*dst = k
	}
	api, err := apiserver.New(apiserver.Config{Store: st, Lifecycle: lc, Templates: staticTemplates{}, AdminToken: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	pokes := new(int)
	api.MountEvents(apiserver.EventsConfig{Poke: func() { *pokes++ }})
	e.srv = httptest.NewServer(conformTo(t, api))
	t.Cleanup(e.srv.Close)
	return e, pokes
}

func evJSON[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

func TestEventsAPI(t *testing.T) {
	t.Parallel()
	e, _ := newEventsEnv(t)
	ctx := context.Background()
	a := e.create(e.key1, client.NewSandbox{Metadata: map[string]string{"user": "u1"}})
	b := e.create(e.key1, client.NewSandbox{})
	e.create(e.key2, client.NewSandbox{})
	if err := e.lc.SetTimeout(ctx, "t1", a.SandboxID, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.lc.Pause(ctx, "t1", a.SandboxID, true); err != nil {
		t.Fatal(err)
	}
	if r := e.do("DELETE", "/sandboxes/"+b.SandboxID, e.key1, ""); r.status != 204 {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	// t1 has: a created, updated, paused; b created, killed = 5 events.
	all := evJSON[[]events.Payload](t, e.do("GET", "/events/sandboxes?limit=100", e.key1, ""))
	if len(all) != 5 || all[0].Type != "sandbox.lifecycle.killed" || all[4].Type != "sandbox.lifecycle.created" {
		t.Fatalf("team events (newest first): %+v", all)
	}
	// Paging with x-next-token, oldest first.
	var paged []events.Payload
	path := "/events/sandboxes?limit=2&orderAsc=true"
	for range 10 {
		r := e.do("GET", path, e.key1, "")
		if r.status != 200 {
			t.Fatalf("page: %d %s", r.status, r.body)
		}
		paged = append(paged, evJSON[[]events.Payload](t, r)...)
		tok := r.header.Get("x-next-token")
		if tok == "" {
			break
		}
		path = "/events/sandboxes?limit=2&nextToken=" + tok
	}
	if len(paged) != 5 || paged[0].ID != all[4].ID || paged[4].ID != all[0].ID {
		t.Fatalf("paged %d events: %+v", len(paged), paged)
	}
	tests := []struct {
		name, path string
		key        string
		want       []string // types
	}{
		{"sandbox", "/events/sandboxes/" + a.SandboxID + "?orderAsc=true", e.key1, []string{"created", "updated", "paused"}},
		{"type filter", "/events/sandboxes?type=killed,sandbox.lifecycle.paused", e.key1, []string{"killed", "paused"}},
		{"offset", "/events/sandboxes?offset=4", e.key1, []string{"created"}},
		{"until in the past", "/events/sandboxes?until=2000-01-01T00:00:00Z", e.key1, nil},
		{"since now-1h", "/events/sandboxes?type=killed&since=" + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), e.key1, []string{"killed"}},
		{"other team", "/events/sandboxes", e.key2, []string{"created"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("GET", tc.path, tc.key, "")
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			var got []string
			for _, p := range evJSON[[]events.Payload](t, r) {
				got = append(got, strings.TrimPrefix(p.Type, events.TypePrefix))
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("types %v, want %v", got, tc.want)
			}
		})
	}
	// Another team's sandbox is not found (an empty list would confirm it
	// exists).
	if r := e.do("GET", "/events/sandboxes/"+a.SandboxID, e.key2, ""); r.status != 404 {
		t.Fatalf("other team's sandbox events: %d %s", r.status, r.body)
	}
	killed := all[0]
	if killed.SandboxID != b.SandboxID || killed.EventData.KillReason != "request" || killed.EventData.Execution == nil ||
		killed.SandboxTeamID != "t1" || killed.SandboxTemplateID != "base" || killed.SandboxBuildID != "b1" || killed.SandboxExecutionID == "" {
		t.Fatalf("killed payload %+v data %+v", killed, killed.EventData)
	}
	for _, bad := range []string{"?limit=0", "?type=nope", "?since=yesterday", "?nextToken=zzz", "?orderAsc=maybe"} {
		if r := e.do("GET", "/events/sandboxes"+bad, e.key1, ""); r.status != 400 {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
	}
	if r := e.do("GET", "/events/sandboxes", "", ""); r.status != 401 {
		t.Fatalf("no key: %d", r.status)
	}
}

func TestWebhooksAPI(t *testing.T) {
	t.Parallel()
	e, pokes := newEventsEnv(t)
	for _, bad := range []string{
		`{"url":"ftp://127.0.0.1/x","signatureSecret":"12345678"}`,
		`{"url":"http://127.0.0.1:9/x"}`,
		`{"url":"http://127.0.0.1:9/x","signatureSecret":"short"}`,
		`{"url":"http://127.0.0.1:9/x","signatureSecret":"12345678","events":["sandbox.lifecycle.exploded"]}`,
	} {
		if r := e.do("POST", "/events/webhooks", e.key1, bad); r.status != 400 {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
	}
	r := e.do("POST", "/events/webhooks", e.key1, `{"name":"kills","url":"http://127.0.0.1:9/hook","enabled":true,"events":["sandbox.lifecycle.killed"],"signatureSecret":"0123456789abcdef"}`)
	if r.status != 201 || strings.Contains(string(r.body), "0123456789abcdef") {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	type hookJSON struct {
		ID      string   `json:"id"`
		URL     string   `json:"url"`
		Enabled bool     `json:"enabled"`
		Events  []string `json:"events"`
	}
	hook := evJSON[hookJSON](t, r)
	if hook.ID == "" || !hook.Enabled || len(hook.Events) != 1 || hook.Events[0] != "sandbox.lifecycle.killed" {
		t.Fatalf("created %+v", hook)
	}
	if list := evJSON[[]hookJSON](t, e.do("GET", "/events/webhooks", e.key1, "")); len(list) != 1 {
		t.Fatalf("list %+v", list)
	}
	if r := e.do("GET", "/events/webhooks/"+hook.ID, e.key2, ""); r.status != 404 {
		t.Fatalf("other team get: %d", r.status)
	}
	if list := evJSON[[]hookJSON](t, e.do("GET", "/events/webhooks", e.key2, "")); len(list) != 0 {
		t.Fatalf("other team list %+v", list)
	}
	sb := e.create(e.key1, client.NewSandbox{})
	if err := e.lc.Kill(context.Background(), "t1", sb.SandboxID, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	type deliveryJSON struct {
		ID, State, EventType, SandboxID string
		Attempts                        int
	}
	ds := evJSON[[]deliveryJSON](t, e.do("GET", "/events/webhooks/"+hook.ID+"/deliveries", e.key1, ""))
	if len(ds) != 1 || ds[0].EventType != "sandbox.lifecycle.killed" || ds[0].SandboxID != sb.SandboxID || ds[0].State != store.DeliveryPending {
		t.Fatalf("deliveries (only the killed event): %+v", ds)
	}
	if r := e.do("POST", "/events/webhooks/"+hook.ID+"/deliveries/"+ds[0].ID+"/redeliver", e.key2, ""); r.status != 404 {
		t.Fatalf("other team redeliver: %d", r.status)
	}
	if r := e.do("POST", "/events/webhooks/"+hook.ID+"/deliveries/"+ds[0].ID+"/redeliver", e.key1, ""); r.status != 202 || *pokes != 1 {
		t.Fatalf("redeliver: %d %s, pokes %d", r.status, r.body, *pokes)
	}
	r = e.do("PATCH", "/events/webhooks/"+hook.ID, e.key1, `{"enabled":false,"url":"http://127.0.0.1:10/new"}`)
	if got := evJSON[hookJSON](t, r); r.status != 200 || got.Enabled || got.URL != "http://127.0.0.1:10/new" || len(got.Events) != 1 {
		t.Fatalf("patch: %d %+v", r.status, got)
	}
	if r := e.do("DELETE", "/events/webhooks/"+hook.ID, e.key2, ""); r.status != 404 {
		t.Fatalf("other team delete: %d", r.status)
	}
	if r := e.do("DELETE", "/events/webhooks/"+hook.ID, e.key1, ""); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	if r := e.do("GET", "/events/webhooks/"+hook.ID, e.key1, ""); r.status != 404 {
		t.Fatalf("get deleted: %d", r.status)
	}
}
