package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The bodies of /files reads are checked here rather than trusted to the
// transport: Go's transport decodes a gzip body it asked for itself, but
// takes an empty one (what envd sends when its first read of the file
// fails after the headers went out) as an empty file. The SDK asks for
// the encoding itself, decodes it, and fails a read whose body ends
// before its Content-Length or its gzip trailer.

// acceptEncoding is the Accept-Encoding of a /files read.
func acceptEncoding(gz bool) string {
	if gz {
		return "gzip"
	}
	return "identity"
}

// fileBody returns resp's body decoded, failing with io.ErrUnexpectedEOF
// when it is shorter than it said.
func fileBody(resp *http.Response) (io.ReadCloser, error) {
	raw := &lengthChecked{r: resp.Body, want: resp.ContentLength}
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return struct {
			io.Reader
			io.Closer
		}{raw, resp.Body}, nil
	case "gzip":
		return &gzipBody{raw: raw, closer: resp.Body}, nil
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("envd answered with Content-Encoding %q, which was not asked for", enc)
	}
}

// lengthChecked fails at the end of a body with a known length that
// delivered fewer bytes.
type lengthChecked struct {
	r    io.Reader
	want int64 // -1 when unknown
	n    int64
}

func (l *lengthChecked) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.n += int64(n)
	if errors.Is(err, io.EOF) && l.want >= 0 && l.n != l.want {
		return n, fmt.Errorf("body ended after %d of %d bytes: %w", l.n, l.want, io.ErrUnexpectedEOF)
	}
	return n, err
}

// gzipBody decodes a gzip body lazily (so ReadStream returns before the
// first byte arrives); an empty or cut stream is io.ErrUnexpectedEOF.
type gzipBody struct {
	raw    *lengthChecked
	closer io.Closer
	zr     *gzip.Reader
	err    error
}

func (g *gzipBody) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		zr, err := gzip.NewReader(g.raw)
		if err != nil {
			g.err = gzipErr(err)
			return 0, g.err
		}
		zr.Multistream(false)
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		g.err = gzipErr(err)
		return n, g.err
	}
	return n, err
}

func (g *gzipBody) Close() error { return g.closer.Close() }

// gzipErr names a broken gzip stream; one that ends before its trailer
// (or before its header: an empty body) is io.ErrUnexpectedEOF.
func gzipErr(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("gzip body: %w", err)
}
