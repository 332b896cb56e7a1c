package app

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAbsPaths: relative paths (the README's --data-dir var/data) resolve
// against the working directory; bare binary names stay for PATH lookup.
func TestAbsPaths(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	c := Config{DataDir: "var/data", BaseRootFSTar: "var/base.tar", EnvdPath: "bin/envd", RunscPath: "runsc", RuncPath: "./bin/runc", TLSCert: "/etc/c.pem"}
	if err := c.absPaths(); err != nil {
		t.Fatal(err)
	}
	want := Config{DataDir: filepath.Join(wd, "var/data"), BaseRootFSTar: filepath.Join(wd, "var/base.tar"), EnvdPath: filepath.Join(wd, "bin/envd"),
		RunscPath: "runsc", RuncPath: filepath.Join(wd, "bin/runc"), TLSCert: "/etc/c.pem"}
	if c.DataDir != want.DataDir || c.BaseRootFSTar != want.BaseRootFSTar || c.EnvdPath != want.EnvdPath || c.RunscPath != want.RunscPath || c.RuncPath != want.RuncPath || c.TLSCert != want.TLSCert || c.TLSKey != "" {
		t.Fatalf("got %+v", c)
	}
}
