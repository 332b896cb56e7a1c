// Package state holds what /init hands to envd at runtime: the access
// token, the default user and working directory, and the environment
// variables every process inherits. It is safe for concurrent use.
package state

import (
	"crypto/subtle"
	"maps"
	"os"
	"strings"
	"sync"

	"github.com/warren-sandbox/warren/internal/envd/identity"
)

// State is envd's mutable runtime configuration.
type State struct {
	mu             sync.RWMutex
	token          string
	hasToken       bool
	defaultUser    string
	defaultWorkdir string
	templateEnv    map[string]string
	initEnv        map[string]string
}

// New returns a State whose template environment is templateEnv (usually
// envd's own environment, which the runtime sets from the template).
func New(templateEnv map[string]string) *State {
	return &State{templateEnv: maps.Clone(templateEnv), initEnv: map[string]string{}}
}

// EnvFromOS parses os.Environ into a map.
func EnvFromOS() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}

// Update is the part of an /init request that changes the state. Nil
// fields leave the current value.
type Update struct {
	EnvVars        map[string]string
	AccessToken    *string
	DefaultUser    *string
	DefaultWorkdir *string
}

// Apply merges an update. Env vars are merged key by key, so applying the
// same update twice is the same as applying it once. An empty access
// token removes the token.
func (s *State) Apply(u Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.Copy(s.initEnv, u.EnvVars)
	if u.AccessToken != nil {
		s.token = *u.AccessToken
		s.hasToken = s.token != ""
	}
	if u.DefaultUser != nil {
		s.defaultUser = *u.DefaultUser
	}
	if u.DefaultWorkdir != nil {
		s.defaultWorkdir = *u.DefaultWorkdir
	}
}

// HasToken reports whether an access token is set.
func (s *State) HasToken() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.hasToken
}

// Token returns the access token ("" when none is set).
func (s *State) Token() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.token
}

// TokenMatches compares a presented token with the access token in
// constant time. It is false when no token is set.
func (s *State) TokenMatches(presented string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.hasToken && subtle.ConstantTimeCompare([]byte(presented), []byte(s.token)) == 1
}

// DefaultUserName returns the user that requests naming no user act as:
// the /init default, else "user" when it exists, else "root".
func (s *State) DefaultUserName() string {
	s.mu.RLock()
	name := s.defaultUser
	s.mu.RUnlock()
	if name != "" {
		return name
	}
	if _, err := identity.Lookup("user"); err == nil {
		return "user"
	}
	return "root"
}

// DefaultWorkdir returns the /init default working directory ("" = home).
func (s *State) DefaultWorkdir() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.defaultWorkdir
}

// InitEnv returns a copy of the variables set through /init.
func (s *State) InitEnv() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.initEnv)
}

// Env returns the environment of a new process before its request's own
// variables: the template environment overlaid with the /init variables.
func (s *State) Env() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := maps.Clone(s.templateEnv)
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, s.initEnv)
	return m
}
