// Package processconnect holds the Connect client and handler generated
// from process.proto for envd's process.Process service.
package processconnect
