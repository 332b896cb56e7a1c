package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// KeySize is the size of the operator's secrets key: 32 bytes.
const KeySize = 32

// ParseKey reads the operator's secrets key: 32 bytes written as 64 hex
// digits or in base64 (standard or URL alphabet, padded or not).
// Surrounding white space (a trailing newline in a key file) is ignored.
// The error never contains the key.
func ParseKey(text string) ([]byte, error) {
	s := strings.TrimSpace(text)
	if len(s) == 2*KeySize {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == KeySize {
			return b, nil
		}
	}
	return nil, fmt.Errorf("secrets key: want %d bytes as 64 hex digits or base64 (e.g. `openssl rand -base64 32`): %w", KeySize, errdefs.ErrInvalid)
}

// sealer encrypts secret values with AES-256-GCM under a key derived
// from the operator's (HKDF-SHA256), binding each ciphertext to its team,
// secret ID and version (additional data), so that a row copied to
// another team or secret does not open.
type sealer struct {
	aead  cipher.AEAD
	keyID string
}

func newSealer(key []byte) (*sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets key: want %d bytes, got %d: %w", KeySize, len(key), errdefs.ErrInvalid)
	}
	k, err := hkdf.Key(sha256.New, key, nil, "warren secrets v1 aes-256-gcm", KeySize)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	id, err := hkdf.Key(sha256.New, key, nil, "warren secrets v1 key id", 8)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return &sealer{aead: aead, keyID: hex.EncodeToString(id)}, nil
}

func additional(teamID, id string, version int64) []byte {
	return []byte("warren-secret\x00" + teamID + "\x00" + id + "\x00" + strconv.FormatInt(version, 10))
}

// seal returns nonce || ciphertext of value, base64.
func (s *sealer) seal(teamID, id string, version int64, value string) string {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(value)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	out := s.aead.Seal(nonce, nonce, []byte(value), additional(teamID, id, version))
	return base64.StdEncoding.EncodeToString(out)
}

// open reverses seal. keyID is the key the row says it was sealed with.
func (s *sealer) open(teamID, id string, version int64, keyID, sealed string) (string, error) {
	if keyID != s.keyID {
		return "", fmt.Errorf("secret %q was sealed with another secrets key (key id %s, this server's is %s): %w", id, keyID, s.keyID, errdefs.ErrUnavailable)
	}
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(b) < s.aead.NonceSize() {
		return "", fmt.Errorf("secret %q: sealed value is malformed: %w", id, errdefs.ErrUnavailable)
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, b[:n], b[n:], additional(teamID, id, version))
	if err != nil {
		return "", fmt.Errorf("secret %q: sealed value does not open (altered, or moved from another secret): %w", id, errdefs.ErrUnavailable)
	}
	return string(plain), nil
}
