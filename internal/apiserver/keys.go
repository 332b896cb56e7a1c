package apiserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// KeyPrefix starts every API key: "e2b_" and 40 hex characters.
const KeyPrefix = "e2b_"

// DefaultTeamID is the team that warren serve creates on first start.
const DefaultTeamID = "default"

var keyPattern = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)

// ValidKey reports whether key has the form e2b_ + 40 lowercase hex.
func ValidKey(key string) bool { return keyPattern.MatchString(key) }

// HashKey returns the hex SHA-256 of key, the form stored.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// MaskKey returns the displayable form of key: prefix, first and last four.
func MaskKey(key string) string {
	if len(key) < len(KeyPrefix)+8 {
		return KeyPrefix + "…"
	}
	return key[:len(KeyPrefix)+4] + "…" + key[len(key)-4:]
}

// NewKey returns a new random API key.
func NewKey() string { return KeyPrefix + sandbox.RandomToken(20) }

// AddKey stores key (new when empty) for teamID under name and returns the
// key in clear, which is shown once and never stored.
func AddKey(ctx context.Context, st store.Store, teamID, name, key string) (string, *store.APIKey, error) {
	if key == "" {
		key = NewKey()
	}
	if !ValidKey(key) {
		return "", nil, errdefs.Publicf(errdefs.ErrInvalid, "api key must be %s followed by 40 lowercase hex characters", KeyPrefix)
	}
	k := &store.APIKey{ID: "key_" + sandbox.RandomToken(8), TeamID: teamID, Name: name, Hash: HashKey(key), Mask: MaskKey(key)}
	if err := st.CreateAPIKey(ctx, k); err != nil {
		return "", nil, err
	}
	return key, k, nil
}

// EnsureDefaultTeam creates the default team if it is missing and, when
// seed is set, makes sure seed is one of its keys (warren serve --api-key).
// It returns whether seed was added now.
func EnsureDefaultTeam(ctx context.Context, st store.Store, seed string) (bool, error) {
	if _, err := st.GetTeam(ctx, DefaultTeamID); errdefs.IsNotFound(err) {
		if err := st.CreateTeam(ctx, &store.Team{ID: DefaultTeamID, Name: "default"}); err != nil && !errdefs.IsAlreadyExists(err) {
			return false, err
		}
	} else if err != nil {
		return false, err
	}
	if seed == "" {
		return false, nil
	}
	if _, err := st.APIKeyByHash(ctx, HashKey(seed)); err == nil {
		return false, nil
	} else if !errdefs.IsNotFound(err) {
		return false, err
	}
	if _, _, err := AddKey(ctx, st, DefaultTeamID, "seed", seed); err != nil {
		return false, err
	}
	return true, nil
}
