// Package gosdke2e runs the Go SDK (pkg/e2b) against a real `warren serve`
// with runsc sandboxes, doing what the README's JS example does. The tests
// are behind the e2e build tag.
package gosdke2e
