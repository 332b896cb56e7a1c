// Package layer handles root filesystem layers on a node's disk: it unpacks
// tar streams (image layers, template root filesystems) into directories
// without letting entries escape them, mounts a stack of layers as an
// overlay with one writable upper directory (one build step), and flattens
// a stack of layers into one tree (a template build's root filesystem).
//
// Everything here needs Linux; mounting and keeping ownership need root.
package layer
