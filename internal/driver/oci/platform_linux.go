package oci

import "syscall"

// platformSupported reports whether OCI runtimes can run here: on Linux.
func platformSupported() error { return nil }

// processGroup puts a runtime invocation in its own process group.
func processGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
