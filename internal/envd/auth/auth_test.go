package auth

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/envd/state"
)

func TestSign(t *testing.T) {
	t.Parallel()
	// Computed independently from the SDK's recipe.
	raw := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	}
	cases := []struct {
		path, op, user, token string
		exp                   int64
		want                  string
	}{
		{"/home/user/a.txt", OpRead, "", "tok", 0, raw("/home/user/a.txt:read::tok")},
		{"a.txt", OpWrite, "root", "tok", 1700000000, raw("a.txt:write:root:tok:1700000000")},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			if got := Sign(tc.path, tc.op, tc.user, tc.token, tc.exp); got != tc.want {
				t.Fatalf("got %s want %s", got, tc.want)
			}
		})
	}
}

func TestCheckFiles(t *testing.T) {
	t.Parallel()
	st := state.New(nil)
	tok := "tok"
	st.Apply(state.Update{AccessToken: &tok})
	a := New(st)
	a.now = func() time.Time { return time.Unix(1000, 0) }
	mk := func(q string, hdr string) *http.Request {
		r := httptest.NewRequest("GET", "/files?"+q, nil)
		if hdr != "" {
			r.Header.Set(AccessTokenHeader, hdr)
		}
		return r
	}
	sig := func(op string, exp int64) string {
		return strings.NewReplacer("+", "%2B", "/", "%2F").Replace(Sign("p", op, "", "tok", exp))
	}
	cases := []struct {
		name string
		r    *http.Request
		op   string
		want string
	}{
		{"token", mk("path=p", "tok"), OpRead, ""},
		{"nothing", mk("path=p", ""), OpRead, MsgMissingToken},
		{"signature", mk("path=p&signature="+sig(OpRead, 0), ""), OpRead, ""},
		{"valid until 2000", mk("path=p&signature="+sig(OpRead, 2000)+"&signature_expiration=2000", ""), OpRead, ""},
		{"expired at 999", mk("path=p&signature="+sig(OpRead, 999)+"&signature_expiration=999", ""), OpRead, MsgSignatureExpired},
		{"other op", mk("path=p&signature="+sig(OpRead, 0), ""), OpWrite, MsgSignatureInvalid},
		{"other path", mk("path=q&signature="+sig(OpRead, 0), ""), OpRead, MsgSignatureInvalid},
		{"tampered expiry", mk("path=p&signature="+sig(OpRead, 2000)+"&signature_expiration=3000", ""), OpRead, MsgSignatureInvalid},
		{"path twice", mk("path=p&path=q&signature="+sig(OpRead, 0), ""), OpRead, MsgSignatureInvalid + `: parameter "path" is given 2 times`},
		{"username twice", mk("path=p&username=&username=root&signature="+sig(OpRead, 0), ""), OpRead, MsgSignatureInvalid + `: parameter "username" is given 2 times`},
		{"expiry not a time", mk("path=p&signature="+sig(OpRead, 0)+"&signature_expiration=soon", ""), OpRead, MsgSignatureInvalid + `: signature_expiration "soon" is not a Unix time`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, got := a.Files(tc.r, tc.op); got != tc.want {
				t.Fatalf("got %q want %q", got, tc.want)
			}
		})
	}
}

func TestMiddlewareAndBasicUser(t *testing.T) {
	t.Parallel()
	st := state.New(nil)
	a := New(st)
	h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(299) }))
	call := func(path, token string) int {
		r := httptest.NewRequest("POST", path, nil)
		if token != "" {
			r.Header.Set(AccessTokenHeader, token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if call("/process.Process/List", "") != 299 {
		t.Fatal("no token set: must pass")
	}
	tok := "tok"
	st.Apply(state.Update{AccessToken: &tok})
	cases := []struct {
		path, token string
		want        int
	}{
		{"/process.Process/List", "", 401},
		{"/process.Process/List", "bad", 401},
		{"/process.Process/List", "tok", 299},
		{"/health", "", 299},
		{"/files", "", 299},
		{"/init", "", 299},
		{"/metrics", "", 401},
	}
	for _, tc := range cases {
		t.Run(tc.path+"_"+tc.token, func(t *testing.T) {
			if got := call(tc.path, tc.token); got != tc.want {
				t.Fatalf("got %d want %d", got, tc.want)
			}
		})
	}
	hd := http.Header{}
	hd.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	if BasicUser(hd) != "root" || BasicUser(http.Header{}) != "" {
		t.Fatal("basic user")
	}
	if _, err := a.User("no-such-user-xyz"); err == nil {
		t.Fatal("unknown user accepted")
	}
}
