package layer

import "strings"

// PortableXattr reports whether a tree carried to another node (a build's
// artifact, a snapshot's saved layer) carries the extended
// attribute name: those a template's tree has of its own (from its image
// layers, its steps, envd's file metadata): file capabilities
// (security.capability, e.g. ping's cap_net_raw), POSIX ACLs and the
// user namespace. Not the others: trusted.* and user.overlay.* are
// overlayfs' own (a whiteout, an opaque directory, a redirect: on a tree
// that is the lower layer of a build FROM the template they would hide
// or conjure files), security.selinux, security.ima and security.evm
// are labels and signatures of the host that wrote them, and the rest is
// nothing a tree is known to use. The node that writes an artifact
// leaves these out; the node that unpacks one refuses it when it carries
// them, as a holder or build that forged it.
func PortableXattr(name string) bool {
	switch name {
	case "security.capability", "system.posix_acl_access", "system.posix_acl_default":
		return true
	}
	return strings.HasPrefix(name, "user.") && !strings.HasPrefix(name, "user.overlay.")
}
