package e2b

import (
	"fmt"
	"strconv"
	"strings"
)

// The envd versions that brought the features the SDK gates, as the JS
// and Python SDKs gate them: a sandbox built from an older template
// gets a *EnvdVersionError (or, where the other SDKs fall back, the
// older behaviour) instead of a request its envd would misread.
const (
	envdSDK            = "0.1.0" // the oldest envd this SDK's protocol reaches
	envdRecursiveWatch = "0.1.4"
	envdMetrics        = "0.1.5"
	envdCommandsStdin  = "0.3.0" // the stdin flag of Start; always open before
	envdDefaultUser    = "0.4.0" // envd picks the user; before, the SDK sends "user"
	envdCloseStdin     = "0.5.2"
	envdOctetStream    = "0.5.7" // raw and gzip uploads; before, multipart only
	envdFileMetadata   = "0.6.2"
	envdEntryInfo      = "0.6.3" // includeEntry on watches
	envdNetworkMounts  = "0.6.4" // allowNetworkMounts on watches
)

// legacyDefaultUser is the user the SDKs name for an envd older than
// envdDefaultUser, which has no default of its own.
const legacyDefaultUser = "user"

// EnvdVersionError is a feature the sandbox's envd is too old for; a
// template rebuilt on a newer base has it.
type EnvdVersionError struct {
	// Feature is what was asked for, e.g. "recursive watch".
	Feature string
	// Required is the oldest envd version that has it.
	Required string
	// Version is the sandbox's envd version.
	Version string
}

func (e *EnvdVersionError) Error() string {
	return fmt.Sprintf("e2b: %s needs envd %s or newer and the sandbox's envd is %s: rebuild the template", e.Feature, e.Required, e.Version)
}

// supports reports whether the sandbox's envd is at least version min.
// An unknown or unparsable version (not one the API reports) counts as
// the newest: the SDK then sends what the caller asked for.
func (e *envd) supports(min string) bool {
	have, ok := parseVersion(e.version)
	if !ok {
		return true
	}
	want, _ := parseVersion(min)
	for i := range have {
		if have[i] != want[i] {
			return have[i] > want[i]
		}
	}
	return true
}

// require is nil when envd has feature, else an *EnvdVersionError.
func (e *envd) require(min, feature string) error {
	if e.supports(min) {
		return nil
	}
	return &EnvdVersionError{Feature: feature, Required: min, Version: e.version}
}

// parseVersion reads "major.minor.patch" with an optional "v" prefix and
// pre-release or build suffix (which is ignored).
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// user is the user a request acts as: the caller's, or on an envd
// without a default user of its own, the one the SDKs name.
func (e *envd) user(u string) string {
	if u == "" && !e.supports(envdDefaultUser) {
		return legacyDefaultUser
	}
	return u
}
