package process

import "runtime"

// The main goroutine keeps the main thread, as in envd (see killAs).
func init() { runtime.LockOSThread() }
