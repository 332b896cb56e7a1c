package netslot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ReclaimLeaked deletes the pool's host network objects whose sandbox is
// neither in keep nor holding a live slot of this pool:
//   - root-namespace veths whose alias is the pool's, with the namespace the
//     alias names;
//   - namespaces "sbx-*" whose lo or veth carries the pool's alias, or
//     that hold nothing but an unmarked lo and are named by no veth
//     anywhere (a slot that crashed while being made);
//   - slot chains of the pool's nftables table, with their jumps.
//
// Objects of other pools (other tables) are left alone.
func (p *pool) ReclaimLeaked(ctx context.Context, keep map[string]bool) (int, error) {
	p.mu.Lock()
	protected := map[string]bool{}
	liveNS := map[string]bool{}
	liveVeth := map[string]bool{}
	for id := range keep {
		protected[id] = true
	}
	for ns, s := range p.live {
		protected[s.SandboxID] = true
		liveNS[ns] = true
		liveVeth[s.HostVeth] = true
		liveVeth[p.cfg.guestTempName(s.Index, useOf(s))] = true
	}
	p.mu.Unlock()

	n := 0
	var errs []error
	// Namespaces are listed before links: a namespace of another pool that
	// is being made right now has its veth (created first, carrying the
	// alias that names the namespace) in this listing of links.
	ents, err := os.ReadDir(p.cfg.NetNSDir)
	if err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	legacy, err := os.ReadDir(p.legacyDir)
	if err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	links, err := listLinks(nil)
	if err != nil {
		return 0, fmt.Errorf("netslot reclaim: list links: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	referenced := map[string]bool{} // namespaces some veth alias names
	for _, l := range links {
		table, id, ns, ok := parseAlias(l.Attrs().Alias)
		if !ok {
			// A veth with the pool's name but no alias yet: the agent died
			// between creating the pair and labelling it.
			if name := l.Attrs().Name; l.Attrs().Alias == "" && p.cfg.isVethName(name) && !liveVeth[name] {
				if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
					errs = append(errs, fmt.Errorf("delete veth %s: %w", name, err))
				} else if err == nil {
					n++
					p.log.Info("reclaimed unlabelled veth", "veth", name)
				}
			}
			continue
		}
		if table != p.cfg.Table || protected[id] || liveNS[ns] {
			referenced[ns] = true
			continue
		}
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("delete veth %s: %w", l.Attrs().Name, err))
			continue
		}
		n++
		p.log.Info("reclaimed leaked veth", "sandbox_id", id, "veth", l.Attrs().Name)
		// The namespace the alias names is this pool's, in its own
		// directory or (made by an older Warren) in the legacy one.
		for _, dir := range []string{p.cfg.NetNSDir, p.legacyDir} {
			if _, err := os.Lstat(filepath.Join(dir, ns)); err != nil {
				continue
			}
			if err := p.deleteNetNS(dir, ns); err != nil {
				errs = append(errs, err)
			} else {
				n++
				p.log.Info("reclaimed leaked netns", "sandbox_id", id, "netns", ns, "dir", dir)
			}
		}
	}

	skip := func(name string) (string, bool) {
		id, ok := sandboxOfNetNS(name)
		return id, !ok || protected[id] || liveNS[name] || referenced[name]
	}
	for _, e := range ents {
		name := e.Name()
		id, skipped := skip(name)
		if skipped {
			continue
		}
		mine, err := p.nsIsOurs(filepath.Join(p.cfg.NetNSDir, name), false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !mine {
			continue
		}
		if err := p.deleteNetNS(p.cfg.NetNSDir, name); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		p.log.Info("reclaimed leaked netns", "sandbox_id", id, "netns", name)
	}
	for _, e := range legacy {
		name := e.Name()
		id, skipped := skip(name)
		if skipped {
			continue
		}
		ok, err := p.reclaimLegacy(name)
		if err != nil {
			errs = append(errs, err)
		} else if ok {
			n++
			p.log.Info("reclaimed leaked netns", "sandbox_id", id, "netns", name, "dir", p.legacyDir)
		}
	}

	p.nftMu.Lock()
	chains, err := p.slotChains()
	if err != nil {
		errs = append(errs, err)
	}
	for _, ch := range chains {
		id, veth, _ := parseSlotChain(ch)
		if protected[id] {
			continue
		}
		if err := p.removeSlot(id, veth); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		p.log.Info("reclaimed leaked firewall chain", "sandbox_id", id, "chain", ch)
	}
	p.nftMu.Unlock()
	if len(errs) > 0 {
		return n, fmt.Errorf("netslot reclaim: %w", errors.Join(append(errs, errdefs.ErrUnavailable)...))
	}
	return n, nil
}

// reclaimLegacy removes namespace name from the legacy directory when it
// is provably this pool's (a link carries the pool's alias), uncovering it
// first when a later mount of that directory hides it. Namespaces there
// that carry no alias may be another tool's: they stay.
func (p *pool) reclaimLegacy(name string) (bool, error) {
	dir := p.legacyDir
	try := func() (bool, error) {
		mine, err := p.nsIsOurs(filepath.Join(dir, name), true)
		if err != nil || !mine {
			return false, err
		}
		return true, deleteNetNS(dir, name)
	}
	if !hidden(dir, name) {
		p.nsMu.RLock()
		defer p.nsMu.RUnlock()
		return try()
	}
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	// Uncovering moves a mount that other tools use aside for a moment:
	// once per name and pool is enough to find out whether it is ours.
	if p.triedHidden[name] {
		return false, nil
	}
	p.triedHidden[name] = true
	var done bool
	err := uncover(dir, func() (err error) {
		done, err = try()
		return err
	})
	if err != nil {
		// The kernel does not move a mount whose parent is shared: what it
		// hides stays until that mount goes (at the latest, a reboot).
		p.log.Warn("netslot: a namespace in the legacy directory is hidden under a later mount of it and cannot be uncovered; it is freed when that mount goes",
			"netns", name, "dir", dir, "error", err)
	}
	return done, nil
}

// nsIsOurs reports whether the namespace at path belongs to this pool: one
// of its links (lo or the veth) carries the pool's alias. Unless strict, a
// namespace whose links carry no alias at all and that has nothing but lo
// is a slot that crashed while being made, and counts as ours too; so does
// a mount target that is not a namespace.
func (p *pool) nsIsOurs(path string, strict bool) (bool, error) {
	name := filepath.Base(path)
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, nil // gone meanwhile
	}
	if st.Type != unix.NSFS_MAGIC {
		return !strict, nil // a bare mount target left by a crash
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return false, fmt.Errorf("netns %s: %w", name, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return false, fmt.Errorf("netns %s: %w", name, err)
	}
	defer nh.Close()
	links, err := listLinks(nh)
	if err != nil {
		return false, fmt.Errorf("netns %s: list links: %w", name, err)
	}
	others := 0
	for _, l := range links {
		alias := l.Attrs().Alias
		if strings.HasPrefix(alias, p.cfg.aliasPrefix()) {
			return true, nil
		}
		if _, _, _, ok := parseAlias(alias); ok {
			return false, nil // another pool's
		}
		if l.Attrs().Name != "lo" {
			others++
		}
	}
	return !strict && others == 0, nil
}

// listLinks lists the links of a namespace (nil: this one), retrying a dump
// that concurrent changes interrupted.
func listLinks(h *netlink.Handle) ([]netlink.Link, error) {
	for i := 0; ; i++ {
		var links []netlink.Link
		var err error
		if h == nil {
			links, err = netlink.LinkList()
		} else {
			links, err = h.LinkList()
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == 20 {
			return links, err
		}
	}
}
