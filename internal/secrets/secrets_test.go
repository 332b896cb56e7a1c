package secrets_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/secrets"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

var testKey = bytes.Repeat([]byte{7}, secrets.KeySize)

func stores(t *testing.T) map[string]func(*testing.T) secrets.Store {
	return map[string]func(*testing.T) secrets.Store{
		"sqlite":   func(t *testing.T) secrets.Store { return storetest.SQLite(t).Secrets() },
		"postgres": func(t *testing.T) secrets.Store { return storetest.Postgres(t).Secrets() },
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	raw := bytes.Repeat([]byte{0xab, 0x01}, 16)
	for name, text := range map[string]string{
		"hex":        hex.EncodeToString(raw),
		"base64":     base64.StdEncoding.EncodeToString(raw) + "\n",
		"raw base64": base64.RawStdEncoding.EncodeToString(raw),
		"url base64": base64.RawURLEncoding.EncodeToString(raw),
	} {
		got, err := secrets.ParseKey(text)
		if err != nil || !bytes.Equal(got, raw) {
			t.Errorf("%s: ParseKey = %x, %v", name, got, err)
		}
	}
	for _, bad := range []string{"", "short", base64.StdEncoding.EncodeToString(raw[:16]), strings.Repeat("z", 64)} {
		_, err := secrets.ParseKey(bad)
		if !errdefs.IsInvalid(err) {
			t.Errorf("ParseKey(%q) = %v, want invalid", bad, err)
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("ParseKey's error repeats the key: %v", err)
		}
	}
}

func TestCRUD(t *testing.T) {
	t.Parallel()
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			svc, err := secrets.New(open(t), testKey)
			if err != nil {
				t.Fatal(err)
			}
			info, err := svc.Create(ctx, "team-a", "OpenAI-Key", "sk-1", map[string]string{"env": "prod"})
			if err != nil {
				t.Fatal(err)
			}
			if info.Name != "openai-key" || info.Version != 1 || !strings.HasPrefix(info.ID, secrets.IDPrefix) || info.Metadata["env"] != "prod" {
				t.Fatalf("created %+v", info)
			}
			if _, err := svc.Create(ctx, "team-a", "openai-KEY", "x", nil); !errdefs.IsAlreadyExists(err) {
				t.Fatalf("second create of the name = %v, want already exists", err)
			}
			// Another team has a namespace of its own and cannot see the first's.
			if _, err := svc.Create(ctx, "team-b", "openai-key", "other", nil); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Get(ctx, "team-b", info.ID); !errdefs.IsNotFound(err) {
				t.Fatalf("team-b reads team-a's secret by ID: %v", err)
			}
			for _, ref := range []string{info.ID, "openai-key", "OPENAI-KEY"} {
				got, err := svc.Get(ctx, "team-a", ref)
				if err != nil || got.ID != info.ID {
					t.Fatalf("Get(%q) = %+v, %v", ref, got, err)
				}
			}
			up, err := svc.Update(ctx, "team-a", "openai-key", "sk-2", nil)
			if err != nil || up.Version != 2 || up.Metadata["env"] != "prod" {
				t.Fatalf("update = %+v, %v", up, err)
			}
			up, err = svc.Update(ctx, "team-a", info.ID, "sk-3", map[string]string{})
			if err != nil || up.Version != 3 || len(up.Metadata) != 0 {
				t.Fatalf("update with metadata = %+v, %v", up, err)
			}
			vals, err := svc.Resolve(ctx, "team-a", []string{"openai-key"})
			if err != nil || vals["openai-key"] != "sk-3" {
				t.Fatalf("Resolve = %v, %v", vals, err)
			}
			if vals, err := svc.Resolve(ctx, "team-b", []string{"openai-key"}); err != nil || vals["openai-key"] != "other" {
				t.Fatalf("team-b Resolve = %v, %v", vals, err)
			}
			if _, err := svc.Resolve(ctx, "team-a", []string{"nope"}); !errdefs.IsInvalid(err) || !strings.Contains(errhttp.Message(err), `"nope"`) {
				t.Fatalf("Resolve of an unknown name = %v", err)
			}
			for _, n := range []string{"b", "a", "c"} {
				if _, err := svc.Create(ctx, "team-a", n, "v", nil); err != nil {
					t.Fatal(err)
				}
			}
			page, more, err := svc.List(ctx, "team-a", "", 2)
			if err != nil || !more || len(page) != 2 || page[0].Name != "a" || page[1].Name != "b" {
				t.Fatalf("List page 1 = %v, %v, %v", page, more, err)
			}
			page, more, err = svc.List(ctx, "team-a", "b", 2)
			if err != nil || more || len(page) != 2 || page[0].Name != "c" || page[1].Name != "openai-key" {
				t.Fatalf("List page 2 = %v, %v, %v", page, more, err)
			}
			if err := svc.Delete(ctx, "team-a", "openai-key"); err != nil {
				t.Fatal(err)
			}
			if err := svc.Delete(ctx, "team-a", "openai-key"); !errdefs.IsNotFound(err) {
				t.Fatalf("second delete = %v", err)
			}
			if _, err := svc.Resolve(ctx, "team-a", []string{"openai-key"}); !errdefs.IsInvalid(err) {
				t.Fatalf("a destroyed secret resolves: %v", err)
			}
			if _, err := svc.Update(ctx, "team-a", "openai-key", "x", nil); !errdefs.IsNotFound(err) {
				t.Fatalf("update of a destroyed secret = %v", err)
			}
		})
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, err := secrets.New(storetest.SQLite(t).Secrets(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	const value = "s3cr3t-value-xyz"
	for _, c := range []struct{ name, value string }{
		{"", value}, {"a{b", value}, {"a}b", value}, {"a\nb", value}, {"sec_abc", value}, {strings.Repeat("n", 300), value},
		{"ok", ""}, {"ok", "line\r\nX-Injected: 1"}, {"ok", "nul\x00"}, {"ok", strings.Repeat("v", secrets.MaxValueBytes+1)},
	} {
		_, err := svc.Create(ctx, "t", c.name, c.value, nil)
		if !errdefs.IsInvalid(err) {
			t.Errorf("Create(%q, %q) = %v, want invalid", c.name, c.value, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") || (len(c.value) > 3 && strings.Contains(err.Error(), c.value)) {
			t.Errorf("error repeats the value: %v", err)
		}
	}
	big := map[string]string{}
	for i := range 33 {
		big[strings.Repeat("k", i+1)] = "v"
	}
	if _, err := svc.Create(ctx, "t", "md", value, big); !errdefs.IsInvalid(err) {
		t.Errorf("33 metadata entries = %v", err)
	}
	if _, err := svc.Create(ctx, "t", "tab", "a\tb", nil); err != nil {
		t.Errorf("a tab is a valid header character: %v", err)
	}
}

// TestSealedAtRest: the database holds no value in the clear, and the same
// value sealed twice gives different ciphertexts.
func TestSealedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w.db")
	st, err := store.OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := secrets.New(st.Secrets(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	const value = "plain-value-0123456789-abcdef"
	a, err := svc.Create(ctx, "t", "a", value, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.Create(ctx, "t", "b", value, nil)
	if err != nil {
		t.Fatal(err)
	}
	ra, _ := st.Secrets().GetSecret(ctx, "t", a.ID)
	rb, _ := st.Secrets().GetSecret(ctx, "t", b.ID)
	if ra.Sealed == rb.Sealed || strings.Contains(ra.Sealed, value) {
		t.Fatalf("sealed values: %q %q", ra.Sealed, rb.Sealed)
	}
	st.Close()
	for _, f := range []string{path, path + "-wal"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if bytes.Contains(raw, []byte(value)) {
			t.Fatalf("%s holds the value in the clear", f)
		}
	}
}

// TestSealBinding: a sealed value moved to another secret, or opened with
// another key, does not open; the error carries no value.
func TestSealBinding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t).Secrets()
	svc, _ := secrets.New(st, testKey)
	const value = "value-of-a-0001"
	a, _ := svc.Create(ctx, "t", "a", value, nil)
	b, _ := svc.Create(ctx, "t", "b", "value-of-b", nil)
	ra, _ := st.GetSecret(ctx, "t", a.ID)
	if _, err := st.UpdateSecret(ctx, "t", b.ID, func(x *secrets.Secret) error { x.Sealed = ra.Sealed; return nil }); err != nil {
		t.Fatal(err)
	}
	_, err := svc.Resolve(ctx, "t", []string{"b"})
	if err == nil || strings.Contains(err.Error(), value) {
		t.Fatalf("a value moved to another secret: %v", err)
	}
	other, _ := secrets.New(st, bytes.Repeat([]byte{9}, secrets.KeySize))
	_, err = other.Resolve(ctx, "t", []string{"a"})
	if !errdefs.IsUnavailable(err) || strings.Contains(err.Error(), value) || !strings.Contains(err.Error(), "another secrets key") {
		t.Fatalf("opened with another key: %v", err)
	}
}

func TestNoKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, err := secrets.New(storetest.SQLite(t).Secrets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Create(ctx, "t", "a", "v", nil)
	if !errdefs.IsUnsupported(err) || !strings.Contains(errhttp.Message(err), "--secrets-key-file") {
		t.Fatalf("Create without a key = %v", err)
	}
	if _, _, err := svc.List(ctx, "t", "", 10); !errdefs.IsUnsupported(err) {
		t.Fatalf("List without a key = %v", err)
	}
	if _, err := svc.Resolve(ctx, "t", []string{"a"}); !errdefs.IsUnsupported(err) {
		t.Fatalf("Resolve without a key = %v", err)
	}
	if v, err := svc.Resolve(ctx, "t", nil); err != nil || len(v) != 0 {
		t.Fatalf("Resolve of nothing = %v, %v", v, err)
	}
}

func TestPlaceholders(t *testing.T) {
	t.Parallel()
	v := "Bearer ${e2b.secrets.a-key} and ${e2b.secrets.b} ${e2b.secrets.unterminated"
	if got := secrets.Placeholders(v); len(got) != 2 || got[0] != "a-key" || got[1] != "b" {
		t.Fatalf("Placeholders = %q", got)
	}
	got := secrets.Fill(v, map[string]string{"a-key": "K"})
	if got != "Bearer K and ${e2b.secrets.b} ${e2b.secrets.unterminated" {
		t.Fatalf("Fill = %q", got)
	}
	if got := secrets.Fill("no placeholder", map[string]string{"a": "b"}); got != "no placeholder" {
		t.Fatalf("Fill = %q", got)
	}
}

// TestTeamDeleteTakesSecrets: a deleted team's secrets go with it.
func TestTeamDeleteTakesSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	if err := st.CreateTeam(ctx, &store.Team{ID: "gone", Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	svc, _ := secrets.New(st.Secrets(), testKey)
	info, err := svc.Create(ctx, "gone", "a", "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteTeam(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Secrets().GetSecret(ctx, "gone", info.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("the deleted team's secret: %v", err)
	}
}
