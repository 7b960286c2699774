//go:build linux

package isolate

// Network mode "tun": the sandbox gets a network namespace of its own with
// loopback and one TUN device, tun0, whose other end (an fd) is handed to the
// caller as Process.TUN. Nothing of the host's network is reachable from
// inside except through whatever the caller does with the packets it reads
// from that fd (internal/egress runs a user-space TCP/IP stack on it that
// dials out on the sandbox's behalf, after a policy check).
//
// Who creates the device: TUNSETIFF creates it in the network namespace of
// the process that OPENED /dev/net/tun, and needs CAP_NET_ADMIN over that
// namespace. The sandbox's init has that capability (in its own user
// namespace) during setup, but /dev/net/tun is often mode 0600 root (in
// containers), which the init's unprivileged host uid cannot open. So:
//   - a root caller opens it from a thread that has joined the sandbox's
//     network namespace (setns, allowed to root in any namespace);
//   - an unprivileged caller cannot join the sandbox's namespace (that needs
//     its user namespace, and setns into a user namespace is impossible for a
//     multi-threaded Go process), so the init opens it itself and sends the
//     fd back on the sync socket; this needs /dev/net/tun to be usable by
//     everyone (mode 0666, the default of most distributions).
// Either way the init then configures the device (addresses, routes, up)
// with its namespaced CAP_NET_ADMIN, before it drops every capability: the
// sandbox's code can't reconfigure it afterwards.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tunOpen opens /dev/net/tun and creates the device TUNName on it, in the
// calling thread's network namespace. The fd is non-blocking, as the
// user-space stack reading it expects.
func tunOpen() (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(TUNName)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", TUNName, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun"), nil
}

// tunCreateIn creates the TUN device inside the network namespace of pid
// (root callers only): a dedicated, locked thread joins that namespace,
// opens the device and goes back. If going back fails the thread is left
// locked, so the Go runtime discards it rather than reuse a thread that sits
// in the sandbox's namespace.
func tunCreateIn(pid int) (*os.File, error) { return tunIn(pid, false) }

// AttachTUN gives the network namespace of pid (a container's init, with a
// namespace of its own holding only loopback) the tun0 of network mode
// "tun", configured as Start's sandboxes have it, and returns the host end.
// It needs root. The sandbox's code must hold no CAP_NET_ADMIN in that
// namespace, or it could reconfigure the device (a docker container
// started with every capability dropped has none).
func AttachTUN(pid int) (*os.File, error) { return tunIn(pid, true) }

func tunIn(pid int, configure bool) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer self.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("join the sandbox's network namespace: %w", err)}
			return
		}
		f, err := tunOpen()
		if err == nil && configure {
			if err = configureTUN(); err != nil {
				f.Close()
				f = nil
			}
		}
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// childTUN is the init's part of the setup (stage 1, before the pivot: it
// may need the host's /dev/net/tun): create the device itself when the
// caller can't, then configure it.
func childTUN(cfg *childConfig) error {
	if cfg.TUNByChild {
		f, err := tunOpen()
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w (an unprivileged caller's sandbox opens /dev/net/tun itself: it must be usable by everyone, mode 0666 as most distributions ship it; or run as root)", err)
		}
		if err != nil {
			return err
		}
		err = unix.Sendmsg(cfg.SyncFD, []byte{'T'}, unix.UnixRights(int(f.Fd())), nil, unix.MSG_NOSIGNAL)
		f.Close()
		if err != nil {
			return fmt.Errorf("hand the TUN device to the supervisor: %w", err)
		}
	}
	return configureTUN()
}

// configureTUN gives tun0 the sandbox's addresses, brings it (and
// loopback) up and routes everything that isn't loopback through it.
func configureTUN() error {
	// Loopback up as well: a namespace created by someone else (runsc
	// for a gVisor sandbox with its host network) may have it down, and
	// code in the sandbox serves on 127.0.0.1 (Host forwards there).
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	link, err := netlink.LinkByName(TUNName)
	if err != nil {
		return fmt.Errorf("find %s: %w", TUNName, err)
	}
	if err := netlink.LinkSetMTU(link, TUNMTU); err != nil {
		return fmt.Errorf("set %s mtu: %w", TUNName, err)
	}
	for _, a := range []struct {
		cidr  string
		flags int
	}{
		{TUNSandboxIPv4 + "/30", 0},
		// No duplicate address detection: nothing else is on this link, and
		// DAD would leave the address unusable for a second after start.
		{TUNSandboxIPv6 + "/64", unix.IFA_F_NODAD},
	} {
		addr, err := netlink.ParseAddr(a.cidr)
		if err != nil {
			return err
		}
		addr.Flags = a.flags
		if err := netlink.AddrAdd(link, addr); err != nil {
			if a.flags != 0 && errors.Is(err, unix.EACCES) {
				continue // IPv6 disabled in this kernel: IPv4 only
			}
			return fmt.Errorf("address %s on %s: %w", a.cidr, TUNName, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring %s up: %w", TUNName, err)
	}
	for _, dst := range []string{"0.0.0.0/0", "::/0"} {
		_, n, _ := net.ParseCIDR(dst)
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: n, Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteAdd(r); err != nil {
			if n.IP.To4() == nil {
				continue // no IPv6 in this kernel
			}
			return fmt.Errorf("default route via %s: %w", TUNName, err)
		}
	}
	return nil
}
