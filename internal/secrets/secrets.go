// Package secrets keeps a team's secrets (E2B's /secrets API): named
// values that sandboxes use without ever seeing them. A value is written
// once (create, update) and never read back through the API; it is
// stored sealed (AES-256-GCM, seal.go) under a key the operator provides,
// and opened only on the host side, where the `${e2b.secrets.NAME}`
// placeholders of a sandbox's network rules are filled in for the egress
// proxy (Resolve, Fill).
//
// Without a key the Service refuses every operation (ErrUnsupported)
// with a message that says what the operator must set.
package secrets

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Limits of the API (E2B's, where it has them).
const (
	MaxPerTeam       = 1000
	MaxNameBytes     = 256
	MaxValueBytes    = 16 << 10
	MaxMetadata      = 32
	MaxMetadataKey   = 128
	MaxMetadataValue = 1024
	MaxMetadataTotal = 8192
	// IDPrefix starts every secret ID; names may not start with it.
	IDPrefix = "sec_"
)

// Secret is a stored secret: its metadata and its sealed current value.
type Secret struct {
	ID        string
	TeamID    string
	Name      string // lower-cased
	Version   int64  // 1 for a new secret, +1 per update
	Metadata  map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Sealed is the current value, sealed (seal.go); KeyID names the
	// key it was sealed with.
	Sealed string
	KeyID  string
}

// Store keeps secrets. ref is a secret's ID or its name; lookups are
// within one team. internal/store implements it (SQLite and Postgres).
type Store interface {
	// CreateSecret inserts s unless the team has limit secrets
	// (ErrExhausted) or one of its name (ErrAlreadyExists).
	CreateSecret(ctx context.Context, s *Secret, limit int) error
	GetSecret(ctx context.Context, teamID, ref string) (*Secret, error)
	// UpdateSecret applies fn to the secret in one transaction.
	UpdateSecret(ctx context.Context, teamID, ref string, fn func(*Secret) error) (*Secret, error)
	DeleteSecret(ctx context.Context, teamID, ref string) error
	// ListSecrets returns up to limit secrets of the team whose names
	// sort after after, by name.
	ListSecrets(ctx context.Context, teamID, after string, limit int) ([]*Secret, error)
}

// Info is what the API shows of a secret: never its value.
type Info struct {
	ID        string
	Name      string
	Version   int64
	Metadata  map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
}

func infoOf(s *Secret) *Info {
	md := maps.Clone(s.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	return &Info{ID: s.ID, Name: s.Name, Version: s.Version, Metadata: md, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// Service is the secrets API over a Store.
type Service struct {
	st Store
	sl *sealer // nil: no key, everything refused
}

// ErrNoKey is the error of every operation of a Service without a key.
var ErrNoKey = errdefs.Publicf(errdefs.ErrUnsupported,
	"secrets are not enabled on this server: the operator has not set a secrets key (--secrets-key-file or WARREN_SECRETS_KEY)")

// New returns a Service over st sealing with key (KeySize bytes, see
// ParseKey). A nil key gives a Service that refuses everything with
// ErrNoKey.
func New(st Store, key []byte) (*Service, error) {
	s := &Service{st: st}
	if key == nil {
		return s, nil
	}
	sl, err := newSealer(key)
	if err != nil {
		return nil, err
	}
	s.sl = sl
	return s, nil
}

// Enabled reports whether the service has a key.
func (s *Service) Enabled() bool { return s != nil && s.sl != nil }

// KeyID names the service's key (a hash of it, safe to log), "" without
// one.
func (s *Service) KeyID() string {
	if !s.Enabled() {
		return ""
	}
	return s.sl.keyID
}

func (s *Service) check() error {
	if !s.Enabled() {
		return ErrNoKey
	}
	return nil
}

// NewID returns a new secret ID: IDPrefix and 24 random characters.
func NewID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return IDPrefix + string(b)
}

// CanonicalName checks a secret name and returns it lower-cased. A name
// goes into the `${e2b.secrets.NAME}` placeholder, so it holds no brace
// and no control character.
func CanonicalName(name string) (string, error) {
	switch {
	case name == "":
		return "", errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'name': must not be empty")
	case len(name) > MaxNameBytes:
		return "", errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'name': longer than %d bytes", MaxNameBytes)
	case !utf8.ValidString(name):
		return "", errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'name': not UTF-8")
	case strings.ContainsFunc(name, func(r rune) bool { return r == '{' || r == '}' || unicode.IsControl(r) }):
		return "", errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'name': must not contain '{', '}' or control characters (it is interpolated into the ${e2b.secrets.<name>} placeholder)")
	}
	n := strings.ToLower(name)
	if strings.HasPrefix(n, IDPrefix) {
		return "", errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'name': the %q prefix is reserved for secret IDs", IDPrefix)
	}
	return n, nil
}

// checkValue refuses a value that cannot be sent in an HTTP header, where
// the egress proxy puts it: empty, too long, not UTF-8, or with a control
// character (a line break would inject headers). The message never
// contains the value.
func checkValue(v string) error {
	switch {
	case v == "":
		return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'value': must not be empty")
	case len(v) > MaxValueBytes:
		return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'value': longer than %d bytes", MaxValueBytes)
	case !utf8.ValidString(v):
		return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'value': not UTF-8")
	case strings.ContainsFunc(v, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }):
		return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'value': must not contain control characters or line breaks (it is sent in HTTP headers)")
	}
	return nil
}

func checkMetadata(md map[string]string) error {
	if len(md) > MaxMetadata {
		return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'metadata': more than %d entries", MaxMetadata)
	}
	total := 0
	for k, v := range md {
		switch {
		case k == "":
			return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'metadata': keys must not be empty")
		case len(k) > MaxMetadataKey:
			return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'metadata': key longer than %d bytes", MaxMetadataKey)
		case len(v) > MaxMetadataValue:
			return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'metadata.%s': longer than %d bytes", k, MaxMetadataValue)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataTotal {
		return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field 'metadata': more than %d bytes in all", MaxMetadataTotal)
	}
	return nil
}

// Create stores a new secret of the team.
func (s *Service) Create(ctx context.Context, teamID, name, value string, md map[string]string) (*Info, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	n, err := CanonicalName(name)
	if err != nil {
		return nil, err
	}
	if err := checkValue(value); err != nil {
		return nil, err
	}
	if err := checkMetadata(md); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	sec := &Secret{ID: NewID(), TeamID: teamID, Name: n, Version: 1, Metadata: maps.Clone(md), CreatedAt: now, UpdatedAt: now, KeyID: s.sl.keyID}
	sec.Sealed = s.sl.seal(teamID, sec.ID, sec.Version, value)
	if err := s.st.CreateSecret(ctx, sec, MaxPerTeam); err != nil {
		if errdefs.IsAlreadyExists(err) {
			return nil, errdefs.Publicf(errdefs.ErrAlreadyExists, "a secret named %q exists already", n)
		}
		return nil, err
	}
	return infoOf(sec), nil
}

// Update stores value as the secret's new version; md, when not nil,
// replaces its metadata.
func (s *Service) Update(ctx context.Context, teamID, ref, value string, md map[string]string) (*Info, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := checkValue(value); err != nil {
		return nil, err
	}
	if err := checkMetadata(md); err != nil {
		return nil, err
	}
	sec, err := s.st.UpdateSecret(ctx, teamID, lookupRef(ref), func(sec *Secret) error {
		sec.Version++
		sec.UpdatedAt = time.Now().UTC()
		if md != nil {
			sec.Metadata = maps.Clone(md)
		}
		sec.KeyID = s.sl.keyID
		sec.Sealed = s.sl.seal(teamID, sec.ID, sec.Version, value)
		return nil
	})
	if err != nil {
		return nil, notFound(ref, err)
	}
	return infoOf(sec), nil
}

// Get returns a secret's metadata.
func (s *Service) Get(ctx context.Context, teamID, ref string) (*Info, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	sec, err := s.st.GetSecret(ctx, teamID, lookupRef(ref))
	if err != nil {
		return nil, notFound(ref, err)
	}
	return infoOf(sec), nil
}

// Delete destroys a secret: its value cannot be used any more.
func (s *Service) Delete(ctx context.Context, teamID, ref string) error {
	if err := s.check(); err != nil {
		return err
	}
	return notFound(ref, s.st.DeleteSecret(ctx, teamID, lookupRef(ref)))
}

// List returns up to limit secrets of the team after the name after, by
// name, and whether there may be more.
func (s *Service) List(ctx context.Context, teamID, after string, limit int) ([]*Info, bool, error) {
	if err := s.check(); err != nil {
		return nil, false, err
	}
	secs, err := s.st.ListSecrets(ctx, teamID, after, limit+1)
	if err != nil {
		return nil, false, err
	}
	more := len(secs) > limit
	if more {
		secs = secs[:limit]
	}
	out := make([]*Info, len(secs))
	for i, sec := range secs {
		out[i] = infoOf(sec)
	}
	return out, more, nil
}

// Resolve returns the current values of the team's secrets named in
// names (IDs work too), keyed as named. A name the team has no secret of
// is ErrInvalid, naming it.
func (s *Service) Resolve(ctx context.Context, teamID string, names []string) (map[string]string, error) {
	if len(names) == 0 {
		return map[string]string{}, nil
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(names))
	for _, n := range names {
		if _, ok := out[n]; ok {
			continue
		}
		sec, err := s.st.GetSecret(ctx, teamID, lookupRef(n))
		if errdefs.IsNotFound(err) {
			return nil, errdefs.Publicf(errdefs.ErrInvalid, "secret %q not found (placeholder ${e2b.secrets.%s})", n, n)
		}
		if err != nil {
			return nil, err
		}
		v, err := s.sl.open(sec.TeamID, sec.ID, sec.Version, sec.KeyID, sec.Sealed)
		if err != nil {
			return nil, err
		}
		out[n] = v
	}
	return out, nil
}

// lookupRef is ref as the store looks it up: an ID as it is, a name
// lower-cased.
func lookupRef(ref string) string {
	if strings.HasPrefix(ref, IDPrefix) {
		return ref
	}
	return strings.ToLower(ref)
}

func notFound(ref string, err error) error {
	if errdefs.IsNotFound(err) {
		return errdefs.Publicf(errdefs.ErrNotFound, "secret %q not found", ref)
	}
	return err
}
