package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/secrets"
)

// secretsKeyFlag adds --secrets-key-file; the key itself is never a flag's
// value (a process's arguments are visible to every user of the host).
func secretsKeyFlag(f *pflag.FlagSet, file *string) {
	f.StringVar(file, "secrets-key-file", "", "file holding the key that seals the teams' secrets at rest: 32 bytes as 64 hex digits or base64, e.g. from `openssl rand -base64 32` (env WARREN_SECRETS_KEY holds the key itself, WARREN_SECRETS_KEY_FILE a file; none: the secrets API and secrets in network rules are refused)")
}

// loadSecretsKey reads the operator's secrets key: from file, else from
// $WARREN_SECRETS_KEY_FILE, else $WARREN_SECRETS_KEY; nil when none is
// given. Errors never contain the key.
func loadSecretsKey(file string) ([]byte, error) {
	if file == "" {
		file = os.Getenv("WARREN_SECRETS_KEY_FILE")
	}
	text := os.Getenv("WARREN_SECRETS_KEY")
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--secrets-key-file: %w", err)
		}
		text = string(b)
	}
	if strings.TrimSpace(text) == "" {
		if file != "" {
			return nil, fmt.Errorf("--secrets-key-file %s is empty: %w", file, errdefs.ErrInvalid)
		}
		return nil, nil
	}
	key, err := secrets.ParseKey(text)
	if err != nil {
		return nil, err
	}
	return key, nil
}
