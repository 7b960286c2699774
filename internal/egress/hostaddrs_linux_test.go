package egress

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// inNewNetns runs f on a thread of its own in a network namespace made for
// the test (the thread is never handed back: it ends with the namespace).
func inNewNetns(t *testing.T, f func() error) {
	t.Helper()
	testdep.Require(t, os.Geteuid() == 0, "root (a network namespace of the test's own)")
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread dies with the namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestHostAddrsLocalRoutes: an AnyIP range (a local route, no interface
// holding any of its addresses) is the host's, seen as soon as the route is
// added, and gone once removed; a connection there is refused.
func TestHostAddrsLocalRoutes(t *testing.T) {
	inNewNetns(t, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		var h hostAddrs
		defer h.close()
		c, err := compile(Policy{Mode: ModeAll})
		if err != nil {
			return err
		}
		var pins pinSet
		anyip := netip.MustParseAddr("198.18.3.5")
		for _, ip := range []string{"127.0.0.1", "127.0.0.9", "::1"} {
			if own, err := h.contains(netip.MustParseAddr(ip)); err != nil || !own {
				return errors.New("loopback " + ip + " not the host's")
			}
		}
		if own, _ := h.contains(anyip); own {
			return errors.New("198.18.3.5 is the host's before any route says so")
		}
		if v, why := c.check(anyip, &h, &pins); v != direct {
			return errors.New("198.18.3.5 refused before the route: " + why)
		}
		h.mu.Lock()
		cached := h.cached
		h.mu.Unlock()
		if !cached {
			return errors.New("the local table was not cached although the subscription runs")
		}
		_, dst, _ := net.ParseCIDR("198.18.3.0/24")
		r := &netlink.Route{Type: unix.RTN_LOCAL, Table: unix.RT_TABLE_LOCAL, Dst: dst, LinkIndex: lo.Attrs().Index, Scope: netlink.SCOPE_HOST}
		if err := netlink.RouteAdd(r); err != nil {
			return err
		}
		if err := waitFor(func() bool { own, _ := h.contains(anyip); return own }); err != nil {
			return errors.New("the AnyIP route was never seen: " + err.Error())
		}
		if v, why := c.check(anyip, &h, &pins); v != refuse || !strings.Contains(why, "address of the host") {
			return errors.New("198.18.3.5 not refused as the host's: " + why)
		}
		if err := netlink.RouteDel(r); err != nil {
			return err
		}
		if err := waitFor(func() bool { own, _ := h.contains(anyip); return !own }); err != nil {
			return errors.New("the AnyIP route's removal was never seen: " + err.Error())
		}
		return nil
	})
}

func waitFor(cond func() bool) error {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return nil
		}
	}
	return errors.New("timed out after 5 s")
}

// TestHostAddrsFailClosed: when the host's addresses can't be read, every
// destination is refused, with the reason.
func TestHostAddrsFailClosed(t *testing.T) {
	h := hostAddrs{read: func() ([]netip.Prefix, error) { return nil, errors.New("netlink broke") }}
	var pins pinSet
	for _, p := range []Policy{{Mode: ModeAll}, {Mode: ModeAllowlist, Allowed: []string{"203.0.113.0/24"}}} {
		c, err := compile(p)
		if err != nil {
			t.Fatal(err)
		}
		if v, why := c.check(netip.MustParseAddr("203.0.113.7"), &h, &pins); v != refuse || !strings.Contains(why, "netlink broke") {
			t.Errorf("%s: check with the host's addresses unreadable = %v (%s), want refused", p.Mode, v, why)
		}
	}
}

// TestReadLocalTable: the kernel's table of this host has its loopback.
func TestReadLocalTable(t *testing.T) {
	ps, err := readLocalTable()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range ps {
		found = found || p.Contains(netip.MustParseAddr("127.0.0.1"))
	}
	if !found {
		t.Errorf("local table %v has no 127.0.0.1", ps)
	}
}
