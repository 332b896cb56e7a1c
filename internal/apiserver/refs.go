package apiserver

import "strings"

// checkRef refuses a malformed "name[:tag]" reference in field: an empty
// name (":tag"), an empty tag ("name:") or more than one ':'.
func checkRef(field, ref string) error {
	name, tag, hasTag := strings.Cut(ref, ":")
	switch {
	case name == "":
		return invalid(field, "%q has no name before ':'", ref)
	case hasTag && tag == "":
		return invalid(field, "%q has an empty tag after ':'", ref)
	case strings.Contains(tag, ":"):
		return invalid(field, "%q has more than one ':'", ref)
	}
	return nil
}

// checkTags refuses empty tags and tags with a ':' in field.
func checkTags(field string, tags []string) error {
	for i, t := range tags {
		if strings.TrimSpace(t) == "" || strings.Contains(t, ":") {
			return invalid(field, "tag %d (%q) must be non-empty and without ':'", i, t)
		}
	}
	return nil
}
