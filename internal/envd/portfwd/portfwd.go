// Package portfwd makes services that listen only on loopback inside the
// sandbox reachable on the sandbox's other addresses, the way upstream envd
// does with a port scanner and socat, but in Go.
//
// Every Interval it reads /proc/net/tcp and /proc/net/tcp6 (gVisor
// provides both) for LISTEN sockets. A port listening on a loopback address
// and on no other address (envd's own port excluded) gets a forwarder on
// each non-loopback address of the sandbox: connections there are proxied
// to the loopback listener. When the loopback listener goes away, so does
// the forwarder (connections already proxied finish on their own).
package portfwd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Config configures a Forwarder; zero fields take the defaults.
type Config struct {
	ProcRoot string                 // default "/proc"
	Interval time.Duration          // default 1s
	Exclude  []uint16               // ports never forwarded (envd's own)
	Addrs    func() []net.IP        // addresses to forward on; default: every non-loopback interface address
	Include  func(port uint16) bool // optional filter of the ports to forward
}

// Forwarder runs the scan loop and the forwarders.
type Forwarder struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	active map[string]*forward // by listen address "ip:port"
}

type forward struct {
	ln     net.Listener
	target string
}

// New returns a Forwarder; call Run.
func New(log *slog.Logger, cfg Config) *Forwarder {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Addrs == nil {
		cfg.Addrs = interfaceAddrs
	}
	return &Forwarder{cfg: cfg, log: log, active: map[string]*forward{}}
}

// Run scans until ctx ends, then closes every forwarder.
func (f *Forwarder) Run(ctx context.Context) {
	t := time.NewTicker(f.cfg.Interval)
	defer t.Stop()
	defer f.closeAll()
	for {
		f.Scan()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scan runs one scan and reconciles the forwarders.
func (f *Forwarder) Scan() {
	var all []listener
	for _, name := range []string{"tcp", "tcp6"} {
		file, err := os.Open(filepath.Join(f.cfg.ProcRoot, "net", name))
		if err != nil {
			continue
		}
		ls, err := parseProcNetTCP(file)
		_ = file.Close()
		if err == nil {
			all = append(all, ls...)
		}
	}
	want := f.wanted(all)
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, fw := range f.active {
		if _, ok := want[key]; !ok {
			_ = fw.ln.Close()
			delete(f.active, key)
			f.log.Debug("port forward stopped", "listen", key)
		}
	}
	for key, target := range want {
		if _, ok := f.active[key]; ok {
			continue
		}
		ln, err := net.Listen("tcp", key)
		if err != nil {
			f.log.Debug("port forward not possible", "listen", key, "error", err)
			continue
		}
		fw := &forward{ln: ln, target: target}
		f.active[key] = fw
		f.log.Debug("port forward started", "listen", key, "target", target)
		go f.serve(fw)
	}
}

// wanted maps each listen address to forward on to its loopback target.
func (f *Forwarder) wanted(all []listener) map[string]string {
	ours := map[string]bool{}
	f.mu.Lock()
	for key := range f.active {
		ours[key] = true
	}
	f.mu.Unlock()
	excluded := map[uint16]bool{}
	for _, p := range f.cfg.Exclude {
		excluded[p] = true
	}
	loop := map[uint16]string{} // port -> target
	public := map[uint16]bool{} // port has a non-loopback listener not ours
	for _, l := range all {
		if excluded[l.port] || (f.cfg.Include != nil && !f.cfg.Include(l.port)) {
			continue
		}
		key := net.JoinHostPort(l.ip.String(), strconv.Itoa(int(l.port)))
		if ours[key] {
			continue
		}
		if l.ip.IsLoopback() {
			t := net.JoinHostPort(l.ip.String(), strconv.Itoa(int(l.port)))
			if prev, ok := loop[l.port]; !ok || (l.ip.To4() != nil && net.ParseIP(hostOf(prev)).To4() == nil) {
				loop[l.port] = t
			}
			continue
		}
		public[l.port] = true
	}
	want := map[string]string{}
	addrs := f.cfg.Addrs()
	for port, target := range loop {
		if public[port] {
			continue
		}
		for _, a := range addrs {
			want[net.JoinHostPort(a.String(), strconv.Itoa(int(port)))] = target
		}
	}
	return want
}

func hostOf(hostport string) string {
	h, _, _ := net.SplitHostPort(hostport)
	return h
}

func (f *Forwarder) serve(fw *forward) {
	for {
		c, err := fw.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				f.log.Debug("port forward accept", "error", err)
			}
			return
		}
		go proxy(c, fw.target)
	}
}

func proxy(c net.Conn, target string) {
	defer c.Close()
	d := net.Dialer{Timeout: 10 * time.Second}
	up, err := d.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

func (f *Forwarder) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, fw := range f.active {
		_ = fw.ln.Close()
		delete(f.active, key)
	}
}

// Active returns the listen addresses being forwarded (for tests and logs).
func (f *Forwarder) Active() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for k, fw := range f.active {
		out[k] = fw.target
	}
	return out
}

// interfaceAddrs lists the non-loopback, non-link-local unicast addresses.
func interfaceAddrs() []net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []net.IP
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, n.IP)
	}
	return out
}
