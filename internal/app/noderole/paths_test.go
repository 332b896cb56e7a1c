package noderole

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
	c := Host{DataDir: "var/data", BaseRootFSTar: "var/base.tar", EnvdPath: "bin/envd", RunscPath: "runsc", RuncPath: "./bin/runc"}
	if err := c.absPaths(); err != nil {
		t.Fatal(err)
	}
	want := Host{DataDir: filepath.Join(wd, "var/data"), BaseRootFSTar: filepath.Join(wd, "var/base.tar"), EnvdPath: filepath.Join(wd, "bin/envd"),
		RunscPath: "runsc", RuncPath: filepath.Join(wd, "bin/runc")}
	if c.DataDir != want.DataDir || c.BaseRootFSTar != want.BaseRootFSTar || c.EnvdPath != want.EnvdPath || c.RunscPath != want.RunscPath || c.RuncPath != want.RuncPath {
		t.Fatalf("got %+v", c)
	}
}
