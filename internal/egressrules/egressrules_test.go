package egressrules

import (
	"strings"
	"testing"
)

func TestParsePattern(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Example.COM": "example.com", "example.com.": "example.com", "*.Example.com": "*.example.com",
		"*.com": "*.com", "a_b.example": "a_b.example", "xn--bcher-kva.example": "xn--bcher-kva.example",
	} {
		if got, err := ParsePattern(in); err != nil || got != want {
			t.Errorf("ParsePattern(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "*", "*.", "a.*.com", "**.a.com", "exa mple.com", "-a.com", "a..com", "1.2.3.4", "a/b", strings.Repeat("a", 64) + ".com", "ex\nample.com"} {
		if got, err := ParsePattern(bad); err == nil {
			t.Errorf("ParsePattern(%q) = %q, want an error", bad, got)
		}
	}
}

func TestMatchAndTransform(t *testing.T) {
	t.Parallel()
	r := &Rules{
		Hosts: []string{"api.example.com", "*.wild.example"},
		Transforms: []Transform{
			{Host: "*.example.com", Headers: map[string]string{"A": "wide"}},
			{Host: "*.api.example.com", Headers: map[string]string{"A": "narrow"}},
			{Host: "api.example.com", Headers: map[string]string{"A": "exact"}},
		},
	}
	for name, want := range map[string]bool{
		"api.example.com": true, "x.wild.example": true, "a.b.wild.example": true, "wild.example": false,
		"example.com": false, "other.example.com": false, "": false, "xwild.example": false,
	} {
		if got := r.AllowsName(name); got != want {
			t.Errorf("AllowsName(%q) = %v", name, got)
		}
	}
	for name, want := range map[string]string{"api.example.com": "exact", "v1.api.example.com": "narrow", "other.example.com": "wide", "example.com": "", "x.org": ""} {
		tr, ok := r.TransformFor(name)
		if got := tr.Headers["A"]; got != want || ok != (want != "") {
			t.Errorf("TransformFor(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	var nilRules *Rules
	if nilRules.AllowsName("a.com") {
		t.Error("nil rules allow a name")
	}
}

func TestRedactCloneEqual(t *testing.T) {
	t.Parallel()
	r := &Rules{Hosts: []string{"a.com"}, Transforms: []Transform{{Host: "a.com", Headers: map[string]string{"Authorization": "Bearer s3cret"}}},
		Proxy: &Proxy{Address: "p:1080", Username: "u", Password: "pw"}}
	c := r.Clone()
	if !c.Equal(r) {
		t.Fatal("clone differs")
	}
	c.Transforms[0].Headers["Authorization"] = "x"
	if r.Transforms[0].Headers["Authorization"] != "Bearer s3cret" || c.Equal(r) {
		t.Fatal("the clone shares its headers")
	}
	red := r.Redact()
	if red.Transforms[0].Headers["Authorization"] != Redacted || red.Proxy.Password != Redacted || red.Proxy.Username != "u" {
		t.Fatalf("redacted: %+v", red)
	}
	if r.Proxy.Password != "pw" {
		t.Fatal("Redact changed the original")
	}
	if (*Rules)(nil).Redact() != nil || !(*Rules)(nil).Equal(nil) || (*Rules)(nil).Equal(&Rules{}) {
		t.Fatal("nil rules")
	}
}
