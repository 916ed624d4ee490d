package mcpconn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/ipybox/ipybox/internal/trusted"
)

// OAuth tokens live in one file on the host, never in the workspace:
//
//	$XDG_CONFIG_HOME/ipybox/oauth-tokens.json (os.UserConfigDir; ~/.config on Linux)
//
// with mode 0600 in a folder with mode 0700, keyed by the server's name and
// URL together, so that every workspace that registers the same server
// under the same name shares one sign-in. A sign-in is bound to the name it
// was made for: approval rules match servers by name, so a sign-in that a
// registration under another name could use would carry the operator's
// credentials past a rule on the operator's name (acc3, attack 16). A
// registration of the same URL under another name signs in anew. Rules do
// not follow URLs instead, because a URL has many spellings (a port, a
// query, a trailing slash, another host name for the same server).
// Not an OS keyring: on Linux the keyring libraries that need no cgo talk to
// the Secret Service over D-Bus, which headless hosts (containers, CI, SSH
// sessions, the Docker image) do not run, so a file would be needed as the
// fallback anyway; it is the choice of gh (hosts.yml) and Claude Code
// (.credentials.json) on Linux too. The sandbox does not mount the user's
// config folder, so sandboxed kernel code cannot read the file; unsandboxed
// kernel code has the user's rights and can (see docs/design.md, security invariant 2).

// tokenFileName is the file's name in its folder.
const tokenFileName = "oauth-tokens.json"

// maxTokenFile bounds the file read.
const maxTokenFile = 4 << 20

// DefaultTokenFile returns where OAuth tokens are kept when
// Options.TokenFile is empty: oauth-tokens.json in the ipybox folder of
// os.UserConfigDir.
func DefaultTokenFile() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no folder for OAuth tokens: %w (set $XDG_CONFIG_HOME or $HOME)", err)
	}
	return filepath.Join(dir, "ipybox", tokenFileName), nil
}

// PrincipalTokenFile returns the token file of principal, one of several
// that share a server as tenants: principals/<principal>/ in
// DefaultTokenFile's folder, which every sandbox masks whole.
func PrincipalTokenFile(principal string) (string, error) {
	if principal == "" || principal == "." || principal == ".." || strings.ContainsAny(principal, `/\`) {
		return "", fmt.Errorf("no OAuth token file for the principal %q", principal)
	}
	def, err := DefaultTokenFile()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(def), "principals", principal, tokenFileName), nil
}

// tokenFile is the JSON layout of the token file.
type tokenFile struct {
	Version int `json:"version"`
	// SignIns holds the sign-ins by server name, then by tokenKey of the
	// server's URL.
	SignIns map[string]map[string]*storedSignIn `json:"signIns,omitempty"`
	// Servers holds the sign-ins of version 1 (before ipybox bound them
	// to a name), by URL. They are listed and kept, never used: any
	// registration of the URL could have used them.
	Servers map[string]*storedSignIn `json:"servers,omitempty"`
}

// tokenFileVersion is the version written.
const tokenFileVersion = 2

// storedSignIn is one server's sign-in: the OAuth client it used (needed
// to refresh) and its token. Client secrets of dynamically registered
// clients are kept here too: they were issued to this host.
type storedSignIn struct {
	ClientID     string           `json:"clientId"`
	ClientSecret string           `json:"clientSecret,omitempty"`
	AuthURL      string           `json:"authUrl,omitempty"`
	TokenURL     string           `json:"tokenUrl"`
	AuthStyle    oauth2.AuthStyle `json:"authStyle,omitempty"`
	RedirectURL  string           `json:"redirectUrl,omitempty"`
	Scopes       []string         `json:"scopes,omitempty"`

	AccessToken  string    `json:"accessToken"`
	TokenType    string    `json:"tokenType,omitempty"`
	RefreshToken string    `json:"refreshToken,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	Obtained     time.Time `json:"obtained"`
}

func (s *storedSignIn) config() *oauth2.Config {
	return &oauth2.Config{
		ClientID: s.ClientID, ClientSecret: s.ClientSecret,
		Endpoint:    oauth2.Endpoint{AuthURL: s.AuthURL, TokenURL: s.TokenURL, AuthStyle: s.AuthStyle},
		RedirectURL: s.RedirectURL, Scopes: slices.Clone(s.Scopes),
	}
}

func (s *storedSignIn) token() *oauth2.Token {
	return &oauth2.Token{AccessToken: s.AccessToken, TokenType: s.TokenType, RefreshToken: s.RefreshToken, Expiry: s.Expiry}
}

func newStoredSignIn(c *oauth2.Config, t *oauth2.Token, obtained time.Time) *storedSignIn {
	return &storedSignIn{
		ClientID: c.ClientID, ClientSecret: c.ClientSecret,
		AuthURL: c.Endpoint.AuthURL, TokenURL: c.Endpoint.TokenURL, AuthStyle: c.Endpoint.AuthStyle,
		RedirectURL: c.RedirectURL, Scopes: slices.Clone(c.Scopes),
		AccessToken: t.AccessToken, TokenType: t.TokenType, RefreshToken: t.RefreshToken, Expiry: t.Expiry,
		Obtained: obtained,
	}
}

// tokenKey is the store's key for a server URL: scheme and host in lower
// case, without a fragment.
func tokenKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = strings.ToLower(u.Host)
	u.Fragment = ""
	return u.String()
}

// tokenStore reads and writes the token file. Every operation locks the
// file (another ipybox process may be refreshing), reads it whole and, to
// change it, replaces it atomically.
type tokenStore struct{ path string }

func (s tokenStore) load(name, serverURL string) (*storedSignIn, error) {
	var out *storedSignIn
	err := s.locked(false, func(f *tokenFile) bool {
		out = f.SignIns[name][tokenKey(serverURL)]
		return false
	})
	return out, err
}

// maxStoredToken bounds a token the file keeps: the file is shared by
// every server, and one server's huge token (a hostile authorization
// server's, of up to a megabyte) must not make it unreadable for all.
const maxStoredToken = 16 << 10

func (s tokenStore) save(name, serverURL string, e *storedSignIn) error {
	if len(e.AccessToken) > maxStoredToken || len(e.RefreshToken) > maxStoredToken {
		return fmt.Errorf("the sign-in to %s was not stored: its token is longer than %d bytes; it lasts for this process only", tokenKey(serverURL), maxStoredToken)
	}
	if name == "" {
		return fmt.Errorf("the sign-in to %s was not stored: it names no server", tokenKey(serverURL))
	}
	return s.locked(true, func(f *tokenFile) bool {
		if f.SignIns[name] == nil {
			f.SignIns[name] = map[string]*storedSignIn{}
		}
		f.SignIns[name][tokenKey(serverURL)] = e
		return true
	})
}

func (s tokenStore) remove(name, serverURL string) (bool, error) {
	var had bool
	err := s.locked(true, func(f *tokenFile) bool {
		k := tokenKey(serverURL)
		_, had = f.SignIns[name][k]
		delete(f.SignIns[name], k)
		if len(f.SignIns[name]) == 0 {
			delete(f.SignIns, name)
		}
		return had
	})
	return had, err
}

// locked runs fn on the file's contents under the file lock, and writes
// the result back when fn returns true.
func (s tokenStore) locked(write bool, fn func(*tokenFile) bool) error {
	dir := filepath.Dir(s.path)
	// Its tokens sign in as the user: the file and the folders above it
	// must be this user's alone (internal/trusted). read refuses a file
	// that others may read.
	if _, err := trusted.Check("the OAuth token file", s.path, false); err != nil {
		return err
	}
	if write {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("OAuth token folder: %w", err)
		}
	}
	unlock, err := lockFile(filepath.Join(dir, "."+tokenFileName+".lock"), write)
	if err != nil {
		return fmt.Errorf("locking the OAuth token file: %w", err)
	}
	defer unlock()
	f, err := s.read()
	if err != nil {
		return err
	}
	if !fn(f) || !write {
		return nil
	}
	f.Version = tokenFileVersion
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // a '<' in a token stays one byte, not six
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return fmt.Errorf("OAuth token file: %w", err)
	}
	data := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	tmp, err := os.CreateTemp(dir, "."+tokenFileName+".*")
	if err != nil {
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600 already; Chmod says so explicitly.
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	return nil
}

// read returns the file's contents; a missing file is empty. A file that
// others may read is refused rather than used: its tokens may have leaked.
func (s tokenStore) read() (*tokenFile, error) {
	f := &tokenFile{Version: tokenFileVersion, SignIns: map[string]map[string]*storedSignIn{}}
	fh, err := os.OpenFile(s.path, os.O_RDONLY|oNoFollow, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the OAuth token file: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the OAuth token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the OAuth token file %s is not a regular file; remove it", s.path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("the OAuth token file %s has mode %04o, so others may have read its tokens; fix it with `chmod 600 %s` (and sign in again if in doubt)", s.path, perm, s.path)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxTokenFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading the OAuth token file: %w", err)
	}
	if len(data) > maxTokenFile {
		return nil, fmt.Errorf("the OAuth token file %s is larger than %d bytes; remove it and sign in again", s.path, maxTokenFile)
	}
	if err := json.Unmarshal(data, f); err != nil {
		// The parser's message is not shown: it may quote a token.
		return nil, fmt.Errorf("the OAuth token file %s is not valid JSON; remove it and sign in again", s.path)
	}
	if f.SignIns == nil {
		f.SignIns = map[string]map[string]*storedSignIn{}
	}
	return f, nil
}

// StoredToken describes one stored OAuth sign-in, without its secrets.
type StoredToken struct {
	// Server is the name of the server the sign-in was made for; only a
	// registration of that name (and URL) uses it. Empty for a sign-in
	// stored by an ipybox before sign-ins were bound to names: it is
	// never used; sign in again.
	Server string
	// URL is the MCP server's URL.
	URL string
	// ClientID is the OAuth client the token was issued to.
	ClientID string
	// Scopes are the scopes asked for; empty when the server chose them.
	Scopes []string
	// Expiry is when the access token expires; zero when the server did
	// not say.
	Expiry time.Time
	// Refreshable reports whether a refresh token is stored, so that an
	// expired access token can be renewed without signing in again.
	Refreshable bool
	// Obtained is when the access token was obtained.
	Obtained time.Time
}

// ListTokens describes the sign-ins stored in file (DefaultTokenFile when
// empty), sorted by server name and URL (those of an older ipybox, without
// a name, first). It never returns a token.
func ListTokens(file string) ([]StoredToken, error) {
	s, err := openStore(file)
	if err != nil {
		return nil, err
	}
	var out []StoredToken
	err = s.locked(false, func(f *tokenFile) bool {
		add := func(name string, m map[string]*storedSignIn) {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				e := m[k]
				out = append(out, StoredToken{Server: name, URL: k, ClientID: e.ClientID, Scopes: slices.Clone(e.Scopes), Expiry: e.Expiry, Refreshable: e.RefreshToken != "", Obtained: e.Obtained})
			}
		}
		add("", f.Servers)
		for _, n := range slices.Sorted(maps.Keys(f.SignIns)) {
			add(n, f.SignIns[n])
		}
		return false
	})
	return out, err
}

// DeleteToken removes the stored sign-in of the server name at serverURL
// from file (DefaultTokenFile when empty) and reports whether there was
// one; an empty name removes a sign-in of an older ipybox, stored by URL
// alone. The authorization server is not told: its tokens stay valid until
// they expire or are revoked there.
func DeleteToken(file, name, serverURL string) (bool, error) {
	s, err := openStore(file)
	if err != nil {
		return false, err
	}
	if name == "" {
		var had bool
		err := s.locked(true, func(f *tokenFile) bool {
			k := tokenKey(serverURL)
			_, had = f.Servers[k]
			delete(f.Servers, k)
			return had
		})
		return had, err
	}
	return s.remove(name, serverURL)
}

func openStore(file string) (tokenStore, error) {
	if file == "" {
		var err error
		if file, err = DefaultTokenFile(); err != nil {
			return tokenStore{}, err
		}
	}
	return tokenStore{path: file}, nil
}
