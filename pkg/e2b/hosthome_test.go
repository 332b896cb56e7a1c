package e2b

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// hostHome keeps the host's login files out of the unit tests. The SDK runs
// every command as `bash -l -c`, and the envd under test runs it on this
// host as root: a login shell there reads /root/.profile, which on a
// developer machine can do anything (pyenv's init waits a minute on a lock
// left by a killed shell). hostHome gives each process start that sets no
// HOME an empty temporary one, rewriting the Connect envelope of
// /process.Process/Start on its way to envd.
func hostHome(t *testing.T, envd http.Handler) http.Handler {
	home := t.TempDir()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/process.Process/Start" {
			if err := setHome(r, home); err != nil {
				t.Errorf("rewrite start request: %v", err)
			}
		}
		envd.ServeHTTP(w, r)
	})
}

// setHome adds HOME to an uncompressed JSON start request's process envs.
func setHome(r *http.Request, home string) error {
	if r.Header.Get("Content-Type") != "application/connect+json" {
		return nil
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		return nil
	}
	var msg map[string]any
	if err := json.Unmarshal(body[5:], &msg); err != nil {
		return err
	}
	proc, _ := msg["process"].(map[string]any)
	if proc == nil {
		return nil
	}
	envs, _ := proc["envs"].(map[string]any)
	if envs == nil {
		envs = map[string]any{}
		proc["envs"] = envs
	}
	if _, set := envs["HOME"]; set {
		return nil
	}
	envs["HOME"] = home
	out, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	framed := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(out)))
	framed = append(framed, out...)
	r.Body = io.NopCloser(bytes.NewReader(framed))
	r.ContentLength = int64(len(framed))
	r.Header.Set("Content-Length", strconv.Itoa(len(framed)))
	return nil
}
