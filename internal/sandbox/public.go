package sandbox

import "github.com/ipybox/ipybox/internal/egress"

// AnyPublicDomain is the allowedDomains entry that lets the sandbox reach
// any public host through the egress proxy; the proxy still refuses IP
// literals and names that resolve to loopback, private or link-local
// addresses. It is the network of ipybox mcp's default sandbox.
const AnyPublicDomain = egress.AnyPublicDomain
