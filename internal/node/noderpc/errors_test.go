package noderpc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
)

// TestErrorMessagesCrossAsChosen: an error's class and the message the
// node chose for a client cross the wire; its text (a path on the node)
// reaches the control plane's log but never a client's message.
func TestErrorMessagesCrossAsChosen(t *testing.T) {
	public := errdefs.Publicf(errdefs.ErrExhausted, "the volume is full")
	private := fmt.Errorf("open /var/lib/warren/volumes/v1/meta.json: %w", errdefs.ErrInvalid)
	for _, tc := range []struct {
		name  string
		err   error
		class error
		msg   string
	}{
		{"public", public, errdefs.ErrExhausted, "the volume is full"},
		{"wrapped public", errdefs.Wrapf(public, "write %q", "f"), errdefs.ErrExhausted, `write "f": the volume is full`},
		{"text only", private, errdefs.ErrInvalid, errhttp.Message(errdefs.ErrInvalid)},
	} {
		got := FromConnectError(ToConnectError(tc.err))
		if !errors.Is(got, tc.class) {
			t.Errorf("%s: %v lost its class %v", tc.name, got, tc.class)
		}
		if m := errhttp.Message(got); m != tc.msg {
			t.Errorf("%s: a client is told %q, want %q", tc.name, m, tc.msg)
		}
		if !strings.Contains(got.Error(), strings.SplitN(tc.err.Error(), ":", 2)[0]) {
			t.Errorf("%s: the log text %q lost the node's %q", tc.name, got.Error(), tc.err.Error())
		}
	}
}
