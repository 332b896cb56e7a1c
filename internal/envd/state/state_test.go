package state

import (
	"os/user"
	"testing"
)

func TestApplyIsIdempotentAndLayersEnv(t *testing.T) {
	t.Parallel()
	s := New(map[string]string{"A": "template", "T": "t"})
	tok, u, wd := "tok", "root", "/work"
	upd := Update{EnvVars: map[string]string{"A": "init", "I": "i"}, AccessToken: &tok, DefaultUser: &u, DefaultWorkdir: &wd}
	s.Apply(upd)
	s.Apply(upd)
	env := s.Env()
	if env["A"] != "init" || env["T"] != "t" || env["I"] != "i" || len(env) != 3 {
		t.Fatalf("env %v", env)
	}
	if got := s.InitEnv(); len(got) != 2 {
		t.Fatalf("init env %v", got)
	}
	if !s.HasToken() || !s.TokenMatches("tok") || s.TokenMatches("tok2") || s.TokenMatches("") {
		t.Fatal("token")
	}
	if s.DefaultUserName() != "root" || s.DefaultWorkdir() != "/work" {
		t.Fatal("defaults")
	}
	empty := ""
	s.Apply(Update{AccessToken: &empty})
	if s.HasToken() || s.TokenMatches("") {
		t.Fatal("empty token must remove the token")
	}
}

func TestDefaultUserFallback(t *testing.T) {
	t.Parallel()
	s := New(nil)
	want := "root"
	if _, err := user.Lookup("user"); err == nil {
		want = "user"
	}
	if got := s.DefaultUserName(); got != want {
		t.Fatalf("default user %q, want %q", got, want)
	}
}
