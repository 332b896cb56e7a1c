package envd

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"os"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// installCABundle appends the PEM certificates of bundle that the trust
// store file does not hold yet. Installing the same bundle again changes
// nothing, so /init stays idempotent.
func installCABundle(store, bundle string) (int, error) {
	var certs [][]byte
	rest := []byte(bundle)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			certs = append(certs, pem.EncodeToMemory(b))
		}
	}
	if len(certs) == 0 {
		return 0, fmt.Errorf("ca bundle: no PEM certificate: %w", errdefs.ErrInvalid)
	}
	have, err := os.ReadFile(store)
	if err != nil && !os.IsNotExist(err) {
		return 0, fmt.Errorf("trust store %s: %w", store, err)
	}
	var add []byte
	added := 0
	for _, c := range certs {
		if bytes.Contains(have, c) || bytes.Contains(add, c) {
			continue
		}
		add = append(add, c...)
		added++
	}
	if added == 0 {
		return 0, nil
	}
	f, err := os.OpenFile(store, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("trust store %s: %w", store, err)
	}
	if len(have) > 0 && have[len(have)-1] != '\n' {
		add = append([]byte("\n"), add...)
	}
	if _, err := f.Write(add); err != nil {
		_ = f.Close()
		return 0, fmt.Errorf("trust store %s: %w", store, err)
	}
	return added, f.Close()
}
