package secrets

import "strings"

// placeholderPrefix starts a placeholder `${e2b.secrets.NAME}` (the SDK's
// Secret.fill); NAME ends at the first '}'.
const placeholderPrefix = "${e2b.secrets."

// Placeholders returns the secret names the placeholders of v refer to,
// in order (with repeats).
func Placeholders(v string) []string {
	var out []string
	for {
		i := strings.Index(v, placeholderPrefix)
		if i < 0 {
			return out
		}
		rest := v[i+len(placeholderPrefix):]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return out
		}
		out = append(out, rest[:j])
		v = rest[j+1:]
	}
}

// Fill replaces every placeholder of v whose name values holds by the
// value; other text (and a placeholder values lacks) stays as it is.
func Fill(v string, values map[string]string) string {
	var b strings.Builder
	for {
		i := strings.Index(v, placeholderPrefix)
		if i < 0 {
			break
		}
		rest := v[i+len(placeholderPrefix):]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			break
		}
		val, ok := values[rest[:j]]
		b.WriteString(v[:i])
		if ok {
			b.WriteString(val)
		} else {
			b.WriteString(v[i : i+len(placeholderPrefix)+j+1])
		}
		v = rest[j+1:]
	}
	b.WriteString(v)
	return b.String()
}
