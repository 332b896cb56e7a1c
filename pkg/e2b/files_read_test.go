package e2b

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// truncatingEnvd answers GET /files the way a broken envd or proxy could:
// fewer bytes than the Content-Length it announced (the connection then
// closes), or a gzip stream cut short in a cleanly ended chunked body.
func truncatingEnvd(t *testing.T) *httptest.Server {
	t.Helper()
	content := bytes.Repeat([]byte("warren "), 4096)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(content)
	zw.Close()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/files" {
			http.NotFound(w, r)
			return
		}
		switch r.URL.Query().Get("path") {
		case "/short-length":
			// Hijacked so that the server itself does not refuse the short
			// write: the bytes on the wire are what a cut connection gives.
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000\r\n\r\n")
			buf.WriteString("only forty bytes of the thousand promised")
			buf.Flush()
			conn.Close()
		case "/gzip-cut":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz.Bytes()[:gz.Len()/2])
		case "/gzip-empty":
			// What envd sends when its first read of the file fails after
			// the headers: gzip announced, no byte of the stream.
			w.Header().Set("Content-Encoding", "gzip")
			w.WriteHeader(http.StatusOK)
		case "/gzip-no-trailer":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz.Bytes()[:gz.Len()-8])
		case "/brotli":
			w.Header().Set("Content-Encoding", "br")
			w.Write([]byte("not ours to decode"))
		case "/gzip-ok":
			if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				t.Errorf("gzip read sent Accept-Encoding %q", r.Header.Get("Accept-Encoding"))
			}
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz.Bytes())
		case "/plain-ok":
			if ae := r.Header.Get("Accept-Encoding"); ae != "identity" {
				t.Errorf("plain read sent Accept-Encoding %q", ae)
			}
			w.Write(content)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(hs.Close)
	return hs
}

// TestReadRefusesShortBodies: a body shorter than announced, or a gzip
// stream that ends early (even an empty one), is an error from Read and
// from reading ReadStream, never a short file returned as success.
func TestReadRefusesShortBodies(t *testing.T) {
	t.Parallel()
	hs := truncatingEnvd(t)
	sb, err := Create(context.Background(), CreateOptions{Config: Config{Debug: true, SandboxURL: hs.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := bytes.Repeat([]byte("warren "), 4096)
	for _, p := range []string{"/short-length", "/gzip-cut", "/gzip-empty", "/gzip-no-trailer", "/brotli"} {
		for _, gz := range []bool{false, true} {
			data, err := sb.Files.Read(ctx, p, FileOptions{Gzip: gz})
			if err == nil {
				t.Errorf("read %s (gzip %v): %d bytes and no error", p, gz, len(data))
			} else if !strings.Contains(err.Error(), p) {
				t.Errorf("read %s: error %q does not name the file", p, err)
			}
			rc, err := sb.Files.ReadStream(ctx, p, FileOptions{Gzip: gz})
			if err == nil {
				_, err = io.Copy(io.Discard, bufio.NewReader(rc))
				rc.Close()
			}
			if err == nil {
				t.Errorf("read stream %s (gzip %v): no error", p, gz)
			}
		}
	}
	if _, err := sb.Files.Read(ctx, "/gzip-cut", FileOptions{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut gzip stream: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := sb.Files.Read(ctx, "/short-length", FileOptions{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short body: %v, want io.ErrUnexpectedEOF", err)
	}
	for _, tc := range []struct {
		path string
		gzip bool
	}{{"/gzip-ok", true}, {"/plain-ok", false}} {
		data, err := sb.Files.Read(ctx, tc.path, FileOptions{Gzip: tc.gzip})
		if err != nil || !bytes.Equal(data, want) {
			t.Errorf("read %s: %d bytes, %v", tc.path, len(data), err)
		}
	}
}

// TestReadFailingFileGzip reads, through the real envd, a file whose
// first read fails (/proc/self/mem at offset 0 gives EIO): Read fails
// (envd answers 500 before any header of a gzip'd answer; an older envd
// that ended an empty gzip stream is io.ErrUnexpectedEOF, see
// TestReadRefusesShortBodies), never an empty file.
func TestReadFailingFileGzip(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	data, err := sb.Files.Read(context.Background(), "/proc/self/mem", FileOptions{Gzip: true})
	if err == nil {
		t.Fatalf("read of a failing file: %d bytes and no error", len(data))
	}
	if !strings.Contains(err.Error(), "500") {
		t.Fatalf("read of a failing file: %v, want envd's 500", err)
	}
}
