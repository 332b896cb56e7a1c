package netslot

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Rearm gives live slot s's guest veth its address and default route
// again, as Acquire made them. gVisor (runsc --network=sandbox) moves them
// from the namespace into its own network stack at each start or restore,
// so a slot kept for a second start (a paused sandbox's, node keep.go)
// needs them back before it. Rearming a slot that has them is not an error.
func (p *pool) Rearm(ctx context.Context, s *Slot) error {
	ns, err := netns.GetFromPath(s.NetNSPath)
	if err != nil {
		return fmt.Errorf("netns %s: %w", s.NetNS, errors.Join(errdefs.ErrUnavailable, err))
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netns %s: %w", s.NetNS, errors.Join(errdefs.ErrUnavailable, err))
	}
	defer h.Close()
	g, err := h.LinkByName(s.GuestVeth)
	if err != nil {
		return fmt.Errorf("netns %s: veth %s: %w", s.NetNS, s.GuestVeth, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := h.AddrReplace(g, &netlink.Addr{IPNet: ipNet(s.GuestIP, s.Prefix)}); err != nil {
		return fmt.Errorf("netns %s: address: %w", s.NetNS, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := h.LinkSetUp(g); err != nil {
		return fmt.Errorf("netns %s: up %s: %w", s.NetNS, s.GuestVeth, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := h.RouteReplace(&netlink.Route{
		LinkIndex: g.Attrs().Index,
		Gw:        net.IP(s.HostIP.AsSlice()),
		Scope:     netlink.SCOPE_UNIVERSE,
	}); err != nil {
		return fmt.Errorf("netns %s: default route: %w", s.NetNS, errors.Join(errdefs.ErrUnavailable, err))
	}
	return nil
}
