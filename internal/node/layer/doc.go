// Package layer is the node's one package for root filesystem trees as
// tars and overlay layers: it unpacks tar streams (image layers, uploaded
// build contexts, template root filesystems, build artifacts, saved
// sandbox layers) into directories with every path resolved by the
// kernel inside them, under limits and extended-attribute policies, with
// OCI whiteouts applied; it writes trees and overlay upper directories
// back as tars (whiteouts in the OCI convention); it mounts a stack of
// layers as an overlay with one writable upper directory (one build
// step) and flattens a stack of layers into one tree (a template build's
// root filesystem); and it resolves paths inside a root
// (ResolveInRoot). The template builder, the template catalog, the
// artifacts that travel between nodes and the node agent's saved layers
// all go through it.
//
// Everything here needs Linux; mounting and keeping ownership need root.
package layer
