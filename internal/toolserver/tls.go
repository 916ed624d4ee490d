package toolserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"time"
)

// EnvCertSHA256 holds the SHA-256 fingerprint (hex) of the certificate of
// an https:// EnvURL, which the runtime pins: it talks to no other server.
const EnvCertSHA256 = "IPYBOX_TOOL_CERT_SHA256"

// ListenTLS listens on addr, "HOST" or "HOST:PORT" (port 0 or none: a free
// one), with HTTPS and a fresh self-signed certificate, for a kernel on
// another machine (a gateway's). HOST is what the kernel dials: a name or
// address of this host that the kernel can reach, not a wildcard. The Host
// header of every request must then be HOST:PORT. ListenTLS returns the
// URL for EnvURL ("https://HOST:PORT") and the certificate's fingerprint
// for EnvCertSHA256. The key never leaves this process.
func (s *Server) ListenTLS(addr string) (url, fingerprint string, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "0"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return "", "", fmt.Errorf("tool server: address %q: name the host or address the kernel dials (not a wildcard), e.g. 10.0.0.5 or host.internal:7000", addr)
	}
	cert, fp, err := selfSigned(host)
	if err != nil {
		return "", "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", "", ErrClosed
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return "", "", fmt.Errorf("tool server: listen on %s: %w", addr, err)
	}
	hostPort := net.JoinHostPort(host, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	if s.tlsHosts == nil {
		s.tlsHosts = map[string]bool{}
	}
	s.tlsHosts[hostPort] = true
	s.serve(tls.NewListener(l, &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}))
	return "https://" + hostPort, fp, nil
}

// tlsHostAllowed reports whether the Host of a request that came over TLS
// is the address a ListenTLS listener serves.
func (s *Server) tlsHostAllowed(host string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tlsHosts[host]
}

// selfSigned makes a P-256 certificate for host, valid for a year, and
// returns it with the hex SHA-256 of its DER.
func selfSigned(host string) (tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return tls.Certificate{}, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "ipybox tool server"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("tool server: make a certificate: %w", err)
	}
	sum := sha256.Sum256(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, hex.EncodeToString(sum[:]), nil
}
