package egressproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/egressrules"
)

// socksConnect opens a connection to host:port through the SOCKS5 proxy
// px (RFC 1928; username and password authentication, RFC 1929, when
// px has a username). The connection to the proxy goes through d, the
// guarded dialer. host is an IP address or a name (the proxy resolves
// it). The answer is the proxy's own TCP connection, carrying the
// tunnel.
func socksConnect(ctx context.Context, d *egress.Dialer, px *egressrules.Proxy, host string, port uint16) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", px.Address)
	if err != nil {
		return nil, fmt.Errorf("egress proxy %s: %w", px.Address, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	if err := socksHandshake(c, px, host, port); err != nil {
		c.Close()
		return nil, fmt.Errorf("egress proxy %s: %w", px.Address, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func socksHandshake(c net.Conn, px *egressrules.Proxy, host string, port uint16) error {
	method := byte(0x00) // no authentication
	if px.Username != "" {
		method = 0x02 // username/password
	}
	if _, err := c.Write([]byte{5, 1, method}); err != nil {
		return err
	}
	var rep [2]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		return err
	}
	if rep[0] != 5 || rep[1] != method {
		return errors.New("the proxy does not accept the authentication method")
	}
	if method == 0x02 {
		if len(px.Username) > 255 || len(px.Password) > 255 {
			return errors.New("username or password longer than 255 bytes")
		}
		msg := append([]byte{1, byte(len(px.Username))}, px.Username...)
		msg = append(append(msg, byte(len(px.Password))), px.Password...)
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, rep[:]); err != nil {
			return err
		}
		if rep[1] != 0 {
			return errors.New("the proxy refused the credentials")
		}
	}
	req := []byte{5, 1, 0} // CONNECT
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		b := a.As4()
		req = append(append(req, 1), b[:]...)
	} else {
		if len(host) > 255 {
			return errors.New("host name too long")
		}
		req = append(append(req, 3, byte(len(host))), host...)
	}
	req = binary.BigEndian.AppendUint16(req, port)
	if _, err := c.Write(req); err != nil {
		return err
	}
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return err
	}
	if head[0] != 5 {
		return errors.New("not a SOCKS5 proxy")
	}
	if head[1] != 0 {
		return fmt.Errorf("the proxy could not connect (reply %d)", head[1])
	}
	var skip int
	switch head[3] {
	case 1:
		skip = 4
	case 4:
		skip = 16
	case 3:
		var l [1]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return err
		}
		skip = int(l[0])
	default:
		return errors.New("bad SOCKS5 reply")
	}
	_, err := io.CopyN(io.Discard, c, int64(skip+2))
	return err
}
