package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// nodeFailure is a node's failure to create a sandbox the control plane
// has validated. A class that would describe the request (not found,
// invalid, conflict, already exists, forbidden, unauthorized) describes the
// node's host there (a missing layer, a bad state record), so it is
// dropped: the API answers 500 and logs the text. Exhausted (the node is
// full), not supported (its driver cannot), unavailable and the request's
// own end keep their class.
func nodeFailure(err error) error {
	switch {
	case errdefs.IsExhausted(err), errdefs.IsUnsupported(err), errdefs.IsUnavailable(err),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errdefs.Class(err) != nil:
		return fmt.Errorf("node: %s", err.Error())
	}
	return err
}
