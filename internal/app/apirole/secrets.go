package apirole

import (
	"log/slog"

	"github.com/warren-sandbox/warren/internal/secrets"
	"github.com/warren-sandbox/warren/internal/store"
)

// secretsService is the teams' secrets over st, sealed with key (nil: the
// service refuses everything). The log names the key by its ID only.
func secretsService(st *store.SQL, key []byte, log *slog.Logger) (*secrets.Service, error) {
	svc, err := secrets.New(st.Secrets(), key)
	if err != nil {
		return nil, err
	}
	if svc.Enabled() {
		log.Info("secrets enabled", "secrets_key_id", svc.KeyID())
	} else {
		log.Info("secrets disabled: no secrets key (--secrets-key-file or WARREN_SECRETS_KEY)")
	}
	return svc, nil
}
