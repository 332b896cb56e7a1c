package portfwd

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/testenv"
)

func TestParseProcNetTCP(t *testing.T) {
	t.Parallel()
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F91 0100007F:D2C4 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
`
	ls, err := parseProcNetTCP(strings.NewReader(tcp))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || !ls[0].ip.Equal(net.IPv4(127, 0, 0, 1)) || ls[0].port != 8080 || !ls[1].ip.Equal(net.IPv4zero) || ls[1].port != 22 {
		t.Fatalf("listeners %+v", ls)
	}
	const tcp6 = `  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1F92 00000000000000000000000000000000:0000 0A 0
   1: 0000000000000000FFFF00000100007F:1F93 00000000000000000000000000000000:0000 0A 0
`
	ls, err = parseProcNetTCP(strings.NewReader(tcp6))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || !ls[0].ip.Equal(net.IPv6loopback) || ls[0].port != 8082 || !ls[1].ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("listeners %+v", ls)
	}
}

// TestForwardsLoopbackService runs a service on 127.0.0.1 and checks that
// it becomes reachable on another address (127.0.0.2 stands in for the
// sandbox's address; only the test's own port is considered).
func TestForwardsLoopbackService(t *testing.T) {
	t.Parallel()
	svc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	port := uint16(svc.Addr().(*net.TCPAddr).Port)
	go func() {
		for {
			c, err := svc.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, "echo:"+line)
			}()
		}
	}()
	fw := New(testenv.Logger(t), Config{
		Addrs:   func() []net.IP { return []net.IP{net.IPv4(127, 0, 0, 2)} },
		Include: func(p uint16) bool { return p == port },
	})
	fw.Scan()
	addr := net.JoinHostPort("127.0.0.2", itoa(port))
	if got := fw.Active(); got[addr] == "" {
		t.Fatalf("no forward for %s: %v", addr, got)
	}
	// A second scan keeps the forward (its own listener is not a public one).
	fw.Scan()
	if got := fw.Active(); got[addr] == "" {
		t.Fatalf("forward dropped on rescan: %v", got)
	}
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	_, _ = io.WriteString(c, "hi\n")
	reply, err := bufio.NewReader(c).ReadString('\n')
	_ = c.Close()
	if err != nil || reply != "echo:hi\n" {
		t.Fatalf("reply %q %v", reply, err)
	}
	// The service goes away: so does the forward.
	_ = svc.Close()
	fw.Scan()
	if got := fw.Active(); len(got) != 0 {
		t.Fatalf("forward outlived the service: %v", got)
	}
	fw.closeAll()
}

func TestExcludedAndPublicPortsNotForwarded(t *testing.T) {
	t.Parallel()
	fw := New(testenv.Logger(t), Config{
		Exclude: []uint16{49983},
		Addrs:   func() []net.IP { return []net.IP{net.IPv4(10, 0, 0, 2)} },
	})
	want := fw.wanted([]listener{
		{ip: net.IPv4(127, 0, 0, 1), port: 49983},
		{ip: net.IPv4(127, 0, 0, 1), port: 80},
		{ip: net.IPv4zero, port: 80},
		{ip: net.IPv4(127, 0, 0, 1), port: 3000},
	})
	if len(want) != 1 || want["10.0.0.2:3000"] != "127.0.0.1:3000" {
		t.Fatalf("wanted %v", want)
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }
