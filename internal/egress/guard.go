package egress

import "net/netip"

// PublicAddr is the proxy's SSRF guard (publicAddr), for other parts that
// dial on someone else's word: it reports whether a is public unicast
// space, judging the IPv4 address that an IPv6 form (NAT64, 6to4, mapped)
// embeds.
func PublicAddr(a netip.Addr) bool { return publicAddr(a) }
