package egressproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/egressrules"
)

// Kinds of first bytes.
const (
	kindNone  = ""     // nothing came, or something neither TLS nor HTTP
	kindTLS   = "tls"  // a TLS ClientHello (name: its SNI)
	kindHTTP  = "http" // an HTTP/1 request (name: its Host)
	maxSniff  = 64 << 10
	maxHeader = 16 << 10
)

// sniffed is what the first bytes of a guest connection said.
type sniffed struct {
	kind string
	name string // canonical host name, "" if none or not a name
	// buf holds every byte read, to be replayed upstream.
	buf []byte
}

// errHelloRead stops the TLS handshake once the ClientHello is read.
var errHelloRead = errors.New("client hello read")

// recorder reads from a connection, keeping what it read.
type recorder struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

// sniff reads the first bytes of c until it knows the name the
// connection is for: the SNI of a TLS ClientHello or the Host of an
// HTTP/1 request. It waits at most wait for the first byte (a protocol
// where the server speaks first sends none) and bounds the rest.
func sniff(ctx context.Context, c net.Conn, wait time.Duration) sniffed {
	rec := &recorder{r: io.LimitReader(c, maxSniff)}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	var first [1]byte
	if _, err := io.ReadFull(rec, first[:]); err != nil {
		return sniffed{buf: rec.buf.Bytes()}
	}
	// The rest of a hello or a request header comes promptly.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(first[:]), rec), 4096)
	switch {
	case first[0] == 0x16: // TLS handshake record
		var name string
		hs := tls.Server(&readOnly{Conn: c, r: br}, &tls.Config{
			GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
				name = h.ServerName
				return nil, errHelloRead
			},
		})
		_ = hs.HandshakeContext(ctx)
		n, _ := egressrules.CanonicalName(name)
		return sniffed{kind: kindTLS, name: n, buf: rec.buf.Bytes()}
	case first[0] >= 'A' && first[0] <= 'Z':
		// Read the request header (and nothing after it) to find Host.
		var head bytes.Buffer
		for head.Len() < maxHeader {
			line, err := br.ReadSlice('\n')
			head.Write(line)
			if err != nil {
				return sniffed{buf: rec.buf.Bytes()}
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				break
			}
		}
		req, err := http.ReadRequest(bufio.NewReader(&head))
		if err != nil {
			return sniffed{buf: rec.buf.Bytes()}
		}
		host := req.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		n, _ := egressrules.CanonicalName(strings.TrimSpace(host))
		// What br read ahead of the header is in rec.buf already.
		return sniffed{kind: kindHTTP, name: n, buf: rec.buf.Bytes()}
	}
	return sniffed{buf: rec.buf.Bytes()}
}

// prefixConn is a connection whose reads come from r (bytes already read
// from it first, then the connection).
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// readOnly reads from r and drops what is written: the aborted
// handshake's alert never reaches the guest.
type readOnly struct {
	net.Conn
	r io.Reader
}

func (p *readOnly) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *readOnly) Write(b []byte) (int, error) { return len(b), nil }

// replay returns c with buf read first.
func replay(c net.Conn, buf []byte) net.Conn {
	if len(buf) == 0 {
		return c
	}
	return &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(buf), c)}
}
