package egress

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// hostAddrs answers "would the host itself take this address?" from the
// kernel's own answer to that question: the `local` routing table, which
// holds every address of every interface and also the ranges a host
// answers on without any interface having them (AnyIP:
// `ip route add local 198.18.0.0/24 dev lo`), plus broadcast and anycast
// routes. An interface list misses AnyIP ranges, and a host service bound
// to a wildcard address answers on all of them.
//
// The table is cached and dropped whenever the kernel announces a route or
// address change (a netlink subscription); while no subscription runs —
// before the first check, or after it failed — every check reads the table
// anew, and a read that fails refuses (policy.reachable).
type hostAddrs struct {
	mu       sync.Mutex
	once     sync.Once
	done     chan struct{}
	watching bool   // the subscription runs: a cached table stays right
	gen      uint64 // bumped on every change the kernel announces
	cached   bool
	local    []netip.Prefix
	// read reads the table (tests swap it); nil means the kernel's.
	read func() ([]netip.Prefix, error)
}

// localRouteTypes are the local table's kinds of routes whose destinations
// the host takes as its own.
var localRouteTypes = map[int]bool{unix.RTN_LOCAL: true, unix.RTN_BROADCAST: true, unix.RTN_ANYCAST: true}

// theHost is what every check of this process asks: one subscription for
// all the sandboxes (and host connections) a process polices, for as long
// as it runs.
var theHost hostAddrs

// readLocalTable lists the destinations of the kernel's local table.
func readLocalTable() ([]netip.Prefix, error) {
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_LOCAL}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("read the host's local routing table: %w", err)
	}
	var out []netip.Prefix
	for _, r := range rs {
		if !localRouteTypes[r.Type] || r.Dst == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones).Masked())
	}
	if len(out) == 0 {
		// Every Linux host has at least its loopback's local routes: an
		// empty table means we read the wrong thing, not a host with none.
		return nil, fmt.Errorf("read the host's local routing table: no local routes")
	}
	return out, nil
}

// watch keeps the cache honest: any route or address change drops it. If a
// subscription can't be had or ends, watching goes false and every check
// reads the table itself.
func (h *hostAddrs) watch() {
	h.done = make(chan struct{})
	routes := make(chan netlink.RouteUpdate, 16)
	addrs := make(chan netlink.AddrUpdate, 16)
	failed := make(chan struct{}, 2)
	onErr := func(error) {
		select {
		case failed <- struct{}{}:
		default:
		}
	}
	if err := netlink.RouteSubscribeWithOptions(routes, h.done, netlink.RouteSubscribeOptions{ErrorCallback: onErr}); err != nil {
		return
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, h.done, netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
		return
	}
	h.watching = true
	go func() {
		defer func() {
			h.mu.Lock()
			h.watching, h.cached = false, false
			h.mu.Unlock()
		}()
		for {
			select {
			case _, ok := <-routes:
				if !ok {
					return
				}
			case _, ok := <-addrs:
				if !ok {
					return
				}
			case <-failed:
				return
			case <-h.done:
				return
			}
			h.mu.Lock()
			h.gen++
			h.cached = false
			h.mu.Unlock()
		}
	}()
}

// contains: does the host take ip as its own?
func (h *hostAddrs) contains(ip netip.Addr) (bool, error) {
	h.mu.Lock()
	if h.read == nil {
		h.once.Do(h.watch)
	}
	if !h.cached {
		gen := h.gen
		read := h.read
		h.mu.Unlock()
		if read == nil {
			read = readLocalTable
		}
		local, err := read()
		h.mu.Lock()
		if err != nil {
			h.mu.Unlock()
			return false, err
		}
		h.local = local
		// Cache only what no announced change has overtaken.
		h.cached = h.watching && h.gen == gen
	}
	local := h.local
	h.mu.Unlock()
	for _, p := range local {
		if p.Contains(ip) {
			return true, nil
		}
	}
	return false, nil
}

// close ends the subscription.
func (h *hostAddrs) close() {
	h.once.Do(func() {})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done != nil {
		select {
		case <-h.done:
		default:
			close(h.done)
		}
	}
}
