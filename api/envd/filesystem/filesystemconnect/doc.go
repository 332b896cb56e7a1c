// Package filesystemconnect holds the Connect client and handler generated
// from filesystem.proto for envd's filesystem.Filesystem service.
package filesystemconnect
