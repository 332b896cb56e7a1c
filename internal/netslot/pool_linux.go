package netslot

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

type pool struct {
	cfg Config
	log *slog.Logger

	nftMu sync.Mutex // one nftables transaction at a time
	nft   *nftables.Conn

	// nsMu is held shared while a namespace file is made or removed in a
	// namespace directory, and exclusively while uncover moves a mount of
	// one aside.
	nsMu sync.RWMutex
	// legacyDir is LegacyNetNSDir (a test's own directory in tests).
	legacyDir string
	// triedHidden holds the legacy namespaces found hidden and uncovered
	// once already (under nsMu).
	triedHidden map[string]bool

	mu   sync.Mutex
	used []bool           // by slot index
	live map[string]*Slot // by namespace name
	next int              // next index to try: rotate to delay reuse
	use  uint64           // use counter for unique names
}

var _ Pool = (*pool)(nil)

// NewPool checks cfg, turns on IPv4 forwarding, and (re)creates the pool's
// nftables table. Slots of an earlier run of the node agent keep their
// namespaces and veths but have no network until they are adopted (Adopt)
// or reclaimed (ReclaimLeaked).
func NewPool(cfg Config, log *slog.Logger) (Pool, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.MTU == 0 {
		cfg.MTU = defaultRouteMTU()
	}
	conn, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("netslot: nftables: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	if err := prepareNetNSDir(cfg.NetNSDir); err != nil {
		return nil, fmt.Errorf("netslot: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	p := &pool{
		cfg:         cfg,
		log:         log,
		nft:         conn,
		legacyDir:   LegacyNetNSDir,
		triedHidden: map[string]bool{},
		used:        make([]bool, cfg.slots()),
		live:        map[string]*Slot{},
		// A random start keeps names unique across agent restarts.
		use: binary.LittleEndian.Uint64(seed[:]) % (useLimit / 2),
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return nil, fmt.Errorf("netslot: enable ip_forward: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	p.nftMu.Lock()
	err = p.setupBase()
	p.nftMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("netslot: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	log.Info("network slot pool", "cidr", cfg.CIDR, "slots", cfg.slots(), "table", cfg.Table, "mtu", cfg.MTU, "netns_dir", cfg.NetNSDir)
	return p, nil
}

// reserve picks a free index and a fresh use number, and records s as live.
func (p *pool) reserve(id string) (*Slot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.used)
	for k := 0; k < n; k++ {
		i := (p.next + k) % n
		if p.used[i] {
			continue
		}
		p.used[i] = true
		p.next = (i + 1) % n
		p.use = (p.use + 1) % useLimit
		host, guest := p.cfg.addrs(i)
		ns := netnsName(id, p.use)
		s := &Slot{
			SandboxID: id,
			Index:     i,
			NetNS:     ns,
			NetNSPath: filepath.Join(p.cfg.NetNSDir, ns),
			HostVeth:  p.cfg.hostVethName(i, p.use),
			GuestVeth: GuestIfName,
			HostIP:    host,
			GuestIP:   guest,
			Prefix:    p.cfg.SlotPrefixLen,
		}
		p.live[ns] = s
		return s, nil
	}
	return nil, fmt.Errorf("network slot for sandbox %q: all %d slots in use: %w", id, n, errdefs.ErrExhausted)
}

func (p *pool) Acquire(ctx context.Context, id string, policy Policy) (*Slot, error) {
	if !sandbox.ValidID(id) {
		return nil, fmt.Errorf("network slot: sandbox ID %q: %w", id, errdefs.ErrInvalid)
	}
	if err := validPolicy(policy); err != nil {
		return nil, fmt.Errorf("network slot for sandbox %q: %w", id, err)
	}
	s, err := p.reserve(id)
	if err != nil {
		return nil, err
	}
	s.Policy = clonePolicy(policy)
	start := time.Now()
	if err := p.create(s); err != nil {
		// The guest temp name is only in the root namespace until moved.
		if l, lerr := netlink.LinkByName(p.cfg.guestTempName(s.Index, useOf(s))); lerr == nil {
			_ = netlink.LinkDel(l)
		}
		if rerr := p.Release(context.WithoutCancel(ctx), s); rerr != nil {
			p.log.Warn("network slot rollback", "sandbox_id", id, "error", rerr)
		}
		return nil, fmt.Errorf("network slot for sandbox %q: %w", id, err)
	}
	p.log.Debug("network slot acquired", "sandbox_id", id, "netns", s.NetNS, "guest_ip", s.GuestIP, "took", time.Since(start))
	return s, nil
}

// useOf recovers the use number of s from its namespace name.
func useOf(s *Slot) uint64 { return parseBase36(tail(s.NetNS)) }

func clonePolicy(p Policy) Policy { return p.Clone() }

// create makes the slot's host objects: the veth pair first (carrying the
// alias that names the namespace, so a crash at any later step leaves
// something ReclaimLeaked recognises), then the namespace, then addresses,
// routes and rules.
func (p *pool) create(s *Slot) error {
	guestTemp := p.cfg.guestTempName(s.Index, useOf(s))
	alias := p.cfg.alias(s.SandboxID, s.NetNS)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.HostVeth, MTU: p.cfg.MTU}, PeerName: guestTemp}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", s.HostVeth, errors.Join(errdefs.ErrUnavailable, err))
	}
	host, err := netlink.LinkByName(s.HostVeth)
	if err != nil {
		return fmt.Errorf("veth %s: %w", s.HostVeth, errors.Join(errdefs.ErrUnavailable, err))
	}
	guest, err := netlink.LinkByName(guestTemp)
	if err != nil {
		return fmt.Errorf("veth %s: %w", guestTemp, errors.Join(errdefs.ErrUnavailable, err))
	}
	for _, l := range []netlink.Link{host, guest} {
		if err := netlink.LinkSetAlias(l, alias); err != nil {
			return fmt.Errorf("alias veth %s: %w", l.Attrs().Name, errors.Join(errdefs.ErrUnavailable, err))
		}
	}
	p.nsMu.RLock()
	ns, err := newNamedNetNS(p.cfg.NetNSDir, s.NetNS)
	p.nsMu.RUnlock()
	if err != nil {
		return fmt.Errorf("create netns %s: %w", s.NetNS, errors.Join(errdefs.ErrUnavailable, err))
	}
	defer ns.Close()
	if err := netlink.LinkSetNsFd(guest, int(ns)); err != nil {
		return fmt.Errorf("move veth %s into %s: %w", guestTemp, s.NetNS, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := p.configureGuest(ns, guestTemp, s); err != nil {
		return fmt.Errorf("netns %s: %w", s.NetNS, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(s.HostIP, s.Prefix)}); err != nil {
		return fmt.Errorf("address of %s: %w", s.HostVeth, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("up %s: %w", s.HostVeth, errors.Join(errdefs.ErrUnavailable, err))
	}
	p.nftMu.Lock()
	err = p.applySlot(s, s.Policy, true)
	p.nftMu.Unlock()
	if err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	return nil
}

// configureGuest sets up the sandbox side inside its namespace: lo up, the
// veth renamed to eth0 with its address, and the default route.
func (p *pool) configureGuest(ns netns.NsHandle, guestTemp string, s *Slot) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	// The alias on lo marks the namespace as this pool's even when its
	// veth is gone (see nsIsOurs).
	if err := h.LinkSetAlias(lo, p.cfg.alias(s.SandboxID, s.NetNS)); err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return err
	}
	g, err := h.LinkByName(guestTemp)
	if err != nil {
		return err
	}
	if err := h.LinkSetName(g, s.GuestVeth); err != nil {
		return err
	}
	if err := h.AddrAdd(g, &netlink.Addr{IPNet: ipNet(s.GuestIP, s.Prefix)}); err != nil {
		return err
	}
	if err := h.LinkSetUp(g); err != nil {
		return err
	}
	return h.RouteAdd(&netlink.Route{
		LinkIndex: g.Attrs().Index,
		Gw:        net.IP(s.HostIP.AsSlice()),
		Scope:     netlink.SCOPE_UNIVERSE,
	})
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, 32)}
}

// deleteNetNS removes the namespace file dir/name (see the package
// function), holding nsMu as uncovering needs.
func (p *pool) deleteNetNS(dir, name string) error {
	p.nsMu.RLock()
	err := unmountRemove(dir, name)
	p.nsMu.RUnlock()
	if !errors.Is(err, unix.EBUSY) {
		return err
	}
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	return deleteNetNS(dir, name)
}

// nsDir is the directory that holds the namespace of s: the pool's own, or
// the legacy one for a slot made by an older Warren.
func (p *pool) nsDir(s *Slot) string {
	if d := filepath.Dir(s.NetNSPath); s.NetNSPath != "" && d == p.legacyDir {
		return d
	}
	return p.cfg.NetNSDir
}

// deleteLink deletes a root-namespace link by name; missing is fine.
func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("veth %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete veth %s: %w", name, err)
	}
	return nil
}

func (p *pool) Release(ctx context.Context, s *Slot) error {
	if s == nil {
		return nil
	}
	p.mu.Lock()
	owned := p.live[s.NetNS] != nil && p.live[s.NetNS].Index == s.Index
	p.mu.Unlock()
	var errs []error
	p.nftMu.Lock()
	if err := p.removeSlot(s.SandboxID, s.HostVeth); err != nil {
		errs = append(errs, err)
	}
	p.nftMu.Unlock()
	// Namespace first, then the host veth: if the agent dies in between,
	// the veth's alias still names the sandbox for ReclaimLeaked. Deleting
	// the host end removes the pair at once, so the addresses are free for
	// the next use of the index.
	if s.NetNS != "" {
		if err := p.deleteNetNS(p.nsDir(s), s.NetNS); err != nil {
			errs = append(errs, err)
		}
	}
	if s.HostVeth != "" {
		if err := deleteLink(s.HostVeth); err != nil {
			errs = append(errs, err)
		}
	}
	// Forget the connections of the guest address, so that the next
	// sandbox on this index inherits no NAT mapping or established flow.
	if s.GuestIP.IsValid() {
		if err := flushConntrack(s.GuestIP); err != nil {
			p.log.Warn("network slot: flush conntrack", "sandbox_id", s.SandboxID, "guest_ip", s.GuestIP, "error", err)
		}
	}
	if len(errs) > 0 {
		// Keep the index reserved: its objects may still be there.
		return fmt.Errorf("release network slot of sandbox %q: %w", s.SandboxID, errors.Join(append(errs, errdefs.ErrUnavailable)...))
	}
	if owned {
		p.mu.Lock()
		delete(p.live, s.NetNS)
		p.used[s.Index] = false
		p.mu.Unlock()
	}
	return nil
}

func (p *pool) Update(ctx context.Context, s *Slot, policy Policy) error {
	if err := validPolicy(policy); err != nil {
		return fmt.Errorf("network slot of sandbox %q: %w", s.SandboxID, err)
	}
	p.mu.Lock()
	live := p.live[s.NetNS]
	p.mu.Unlock()
	if live == nil {
		return fmt.Errorf("network slot %s of sandbox %q: %w", s.NetNS, s.SandboxID, errdefs.ErrNotFound)
	}
	pol := clonePolicy(policy)
	p.nftMu.Lock()
	err := p.applySlot(live, pol, false)
	p.nftMu.Unlock()
	if err != nil {
		return fmt.Errorf("network slot of sandbox %q: %w", s.SandboxID, errors.Join(errdefs.ErrUnavailable, err))
	}
	p.mu.Lock()
	live.Policy = pol
	p.mu.Unlock()
	s.Policy = clonePolicy(pol)
	return nil
}

func (p *pool) Adopt(ctx context.Context, s *Slot) error {
	if s == nil || !sandbox.ValidID(s.SandboxID) {
		return fmt.Errorf("adopt network slot: %w", errdefs.ErrInvalid)
	}
	if err := validPolicy(s.Policy); err != nil {
		return fmt.Errorf("adopt network slot of sandbox %q: %w", s.SandboxID, err)
	}
	host, guest := p.cfg.addrs(s.Index)
	if s.Index < 0 || s.Index >= len(p.used) || s.HostIP != host || s.GuestIP != guest || s.Prefix != p.cfg.SlotPrefixLen {
		return fmt.Errorf("adopt network slot of sandbox %q: index %d and addresses do not fit this pool: %w", s.SandboxID, s.Index, errdefs.ErrInvalid)
	}
	if id, ok := sandboxOfNetNS(s.NetNS); !ok || id != s.SandboxID {
		return fmt.Errorf("adopt network slot of sandbox %q: namespace %q: %w", s.SandboxID, s.NetNS, errdefs.ErrInvalid)
	}
	if s.NetNSPath != filepath.Join(p.nsDir(s), s.NetNS) {
		return fmt.Errorf("adopt network slot of sandbox %q: netns path %q: %w", s.SandboxID, s.NetNSPath, errdefs.ErrInvalid)
	}
	if _, err := os.Stat(s.NetNSPath); err != nil {
		return fmt.Errorf("adopt network slot of sandbox %q: netns %s: %w", s.SandboxID, s.NetNS, errdefs.ErrNotFound)
	}
	l, err := netlink.LinkByName(s.HostVeth)
	if err != nil || l.Attrs().Alias != p.cfg.alias(s.SandboxID, s.NetNS) {
		return fmt.Errorf("adopt network slot of sandbox %q: veth %s: %w", s.SandboxID, s.HostVeth, errdefs.ErrNotFound)
	}
	p.mu.Lock()
	if prev := p.live[s.NetNS]; prev != nil {
		p.mu.Unlock()
		return nil // adopted already
	}
	if p.used[s.Index] {
		p.mu.Unlock()
		return fmt.Errorf("adopt network slot of sandbox %q: index %d in use: %w", s.SandboxID, s.Index, errdefs.ErrConflict)
	}
	p.used[s.Index] = true
	own := *s
	own.Policy = clonePolicy(s.Policy)
	p.live[s.NetNS] = &own
	p.mu.Unlock()
	p.nftMu.Lock()
	err = p.applySlot(&own, own.Policy, true)
	p.nftMu.Unlock()
	if err != nil {
		p.mu.Lock()
		delete(p.live, s.NetNS)
		p.used[s.Index] = false
		p.mu.Unlock()
		return fmt.Errorf("adopt network slot of sandbox %q: %w", s.SandboxID, errors.Join(errdefs.ErrUnavailable, err))
	}
	return nil
}

// DeleteTable removes the pool's nftables table (with every slot chain)
// and its namespace directory. For tests and uninstalling; live slots lose
// their network.
func DeleteTable(cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	if err := removeNetNSDir(cfg.NetNSDir); err != nil {
		return fmt.Errorf("netslot: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netslot: nftables: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	conn.DelTable(&nftables.Table{Name: cfg.Table, Family: nftables.TableFamilyINet})
	if err := conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netslot: delete table %q: %w", cfg.Table, errors.Join(errdefs.ErrUnavailable, err))
	}
	return nil
}

// flushConntrack deletes the conntrack entries from or to ip.
func flushConntrack(ip netip.Addr) error {
	src, dst := &netlink.ConntrackFilter{}, &netlink.ConntrackFilter{}
	if err := src.AddIP(netlink.ConntrackOrigSrcIP, net.IP(ip.AsSlice())); err != nil {
		return err
	}
	if err := dst.AddIP(netlink.ConntrackOrigDstIP, net.IP(ip.AsSlice())); err != nil {
		return err
	}
	_, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, src, dst)
	if errors.Is(err, netlink.ErrDumpInterrupted) {
		_, err = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, src, dst)
	}
	return err
}

// defaultRouteMTU is the MTU of the interface of the IPv4 default route, or
// 1500.
func defaultRouteMTU() int {
	routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return 1500
	}
	for _, r := range routes {
		if r.Dst != nil && !r.Dst.IP.IsUnspecified() {
			continue
		}
		if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil && l.Attrs().MTU >= 576 {
			return l.Attrs().MTU
		}
	}
	return 1500
}
