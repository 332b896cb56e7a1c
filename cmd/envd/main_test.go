package main

import "testing"

func TestRunFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		ok   bool
	}{
		{"version", []string{"--version"}, true},
		{"bad port", []string{"--port", "0"}, false},
		{"bad log level", []string{"--log-level", "loud"}, false},
		{"bad init hash", []string{"--port", "1", "--init-token-sha256", "xyz"}, false},
		{"unknown flag", []string{"--nope"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := run(tc.args); (err == nil) != tc.ok {
				t.Fatalf("run(%v) = %v", tc.args, err)
			}
		})
	}
}
