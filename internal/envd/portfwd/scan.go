package portfwd

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// listener is one LISTEN socket from /proc/net/tcp{,6}.
type listener struct {
	ip   net.IP
	port uint16
}

// parseProcNetTCP returns the LISTEN sockets of a /proc/net/tcp or tcp6
// table.
func parseProcNetTCP(r io.Reader) ([]listener, error) {
	var out []listener
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != "0A" { // 0A = TCP_LISTEN
			continue
		}
		addr, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			continue
		}
		ip, err := decodeIP(addr)
		if err != nil {
			continue
		}
		out = append(out, listener{ip: ip, port: uint16(port)})
	}
	return out, sc.Err()
}

// decodeIP decodes the kernel's hex address: 32-bit words in host (little
// endian) byte order.
func decodeIP(s string) (net.IP, error) {
	b, err := hex.DecodeString(s)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return nil, fmt.Errorf("address %q: not an IPv4 or IPv6 address", s)
	}
	ip := make(net.IP, len(b))
	for w := 0; w < len(b); w += 4 {
		ip[w], ip[w+1], ip[w+2], ip[w+3] = b[w+3], b[w+2], b[w+1], b[w]
	}
	if len(ip) == 16 {
		if v4 := ip.To4(); v4 != nil {
			return v4, nil
		}
	}
	return ip, nil
}
