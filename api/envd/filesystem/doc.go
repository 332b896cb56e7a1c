// Package filesystem holds the Go code generated from filesystem.proto:
// the messages of envd's filesystem.Filesystem service.
package filesystem
