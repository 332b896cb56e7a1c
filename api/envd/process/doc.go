// Package process holds the Go code generated from process.proto: the
// messages of envd's process.Process service.
package process
