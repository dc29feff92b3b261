package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// refused are the networks a webhook may not reach unless its endpoint
// allows private targets: loopback, RFC 1918 and ULA, link-local (the
// cloud metadata address 169.254.169.254 among them), CGNAT, multicast,
// unspecified, and the other special-purpose ranges no public receiver
// lives in.
var refused = func() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{
		"0.0.0.0/8",       // "this network", unspecified
		"10.0.0.0/8",      // RFC 1918
		"100.64.0.0/10",   // CGNAT (RFC 6598)
		"127.0.0.0/8",     // loopback
		"169.254.0.0/16",  // link-local, cloud metadata
		"172.16.0.0/12",   // RFC 1918
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"192.168.0.0/16",  // RFC 1918
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, broadcast
		"::/128",          // unspecified
		"::1/128",         // loopback
		"64:ff9b::/96",    // NAT64: an IPv4 address behind it
		"64:ff9b:1::/48",  // local NAT64
		"100::/64",        // discard
		"2001:db8::/32",   // documentation
		"fc00::/7",        // unique local (ULA)
		"fe80::/10",       // link-local
		"ff00::/8",        // multicast
	} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}()

// ErrRefusedAddress is what a connection to an address the guard refuses
// fails with.
var ErrRefusedAddress = errors.New("webhooks: refused address")

// Refused says why addr may not be reached by an endpoint that does not
// allow private targets, or "" when it may.
func Refused(addr netip.Addr) string {
	addr = addr.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	if !addr.IsValid() {
		return "not an IP address"
	}
	for _, p := range refused {
		if p.Contains(addr) {
			return fmt.Sprintf("%s is in %s (loopback, private, link-local, CGNAT, multicast or reserved)", addr, p)
		}
	}
	return ""
}

// Resolver looks a host's addresses up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer makes a connection; *net.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Guard dials webhooks: it resolves the host itself, refuses the
// addresses Refused names unless AllowPrivate, and dials only the address
// it checked, so that a name which resolves to a private address (or
// resolves again to one, DNS rebinding) is refused when the connection is
// made, not when the endpoint was created.
type Guard struct {
	Resolver     Resolver
	Dialer       Dialer
	AllowPrivate bool
}

// NewGuard is a guard on the system's resolver, whose dialer checks the
// address once more as it connects (a net.Dialer Control function).
func NewGuard(allowPrivate bool) *Guard {
	d := &net.Dialer{}
	if !allowPrivate {
		d.Control = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", ErrRefusedAddress, address, err)
			}
			if why := Refused(ap.Addr()); why != "" {
				return fmt.Errorf("%w: %s", ErrRefusedAddress, why)
			}
			return nil
		}
	}
	return &Guard{Resolver: net.DefaultResolver, Dialer: d, AllowPrivate: allowPrivate}
}

// DialContext connects to address (host:port) as http.Transport asks.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		ipNetwork := "ip"
		switch network {
		case "tcp4":
			ipNetwork = "ip4"
		case "tcp6":
			ipNetwork = "ip6"
		}
		if addrs, err = g.Resolver.LookupNetIP(ctx, ipNetwork, host); err != nil {
			return nil, fmt.Errorf("webhooks: resolve %s: %w", host, err)
		}
	}
	var firstErr error
	for _, ip := range addrs {
		if !g.AllowPrivate {
			if why := Refused(ip); why != "" {
				if firstErr == nil {
					firstErr = fmt.Errorf("%w: %s resolves to %s", ErrRefusedAddress, host, why)
				}
				continue
			}
		}
		conn, err := g.Dialer.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		if firstErr == nil || errors.Is(firstErr, ErrRefusedAddress) {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("webhooks: %s has no address", host)
	}
	return nil, firstErr
}
