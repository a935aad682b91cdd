package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Permission is a class of routes an identity may call.
type Permission string

// The route classes. /healthz and /readyz are in none: they are open.
const (
	// ReadViews: /views and what is under it but change feeds (keys,
	// entries, windows), /openapi.json, /topology, /versions.
	ReadViews Permission = "read"
	// ReadFeeds: the change feeds, /views/{view}/changes.
	ReadFeeds Permission = "feeds"
	// SubmitCommands: POST /aggregates/{aggregate}/{id}/commands.
	SubmitCommands Permission = "commands"
	// Operate: /status, /metrics and the operators' routes.
	Operate Permission = "operate"
)

// AllPermissions are the four classes: an operator's, or a single
// token's that may do everything.
func AllPermissions() []Permission {
	return []Permission{ReadViews, ReadFeeds, SubmitCommands, Operate}
}

// Identity is who sent a request, as an Authenticator found, and what it
// may do.
type Identity struct {
	Subject     string       `json:"sub"`
	Permissions []Permission `json:"perms"`
}

// Can reports whether the identity has the permission.
func (id Identity) Can(p Permission) bool { return slices.Contains(id.Permissions, p) }

// Authenticator tells who sent a request. It answers ErrNoCredentials if
// the request carries no credentials of its kind (so that the next of a
// FirstOf chain may try), and any other error if it refuses the ones it
// carries: that error is shown to the caller, so it must not hold the
// credentials.
type Authenticator interface {
	Authenticate(r *http.Request) (Identity, error)
}

// ErrNoCredentials: the request carries no credentials the Authenticator
// knows.
var ErrNoCredentials = errors.New("httpapi: no credentials")

// AuthenticatorFunc is a function as an Authenticator.
type AuthenticatorFunc func(r *http.Request) (Identity, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(r *http.Request) (Identity, error) { return f(r) }

// FirstOf is the first of the authenticators that finds credentials of
// its kind in a request: its identity, or its refusal.
func FirstOf(auths ...Authenticator) Authenticator {
	return AuthenticatorFunc(func(r *http.Request) (Identity, error) {
		for _, a := range auths {
			id, err := a.Authenticate(r)
			if !errors.Is(err, ErrNoCredentials) {
				return id, err
			}
		}
		return Identity{}, ErrNoCredentials
	})
}

// Tokens authenticates "Authorization: Bearer <token>" by a static table
// of tokens. Every token is compared, in constant time, whatever matches;
// a token not in the table is ErrNoCredentials (it may be another
// authenticator's).
func Tokens(tokens map[string]Identity) Authenticator {
	type entry struct {
		sum [sha256.Size]byte
		id  Identity
	}
	var table []entry
	for t, id := range tokens {
		if t != "" {
			table = append(table, entry{sha256.Sum256([]byte(t)), id})
		}
	}
	return AuthenticatorFunc(func(r *http.Request) (Identity, error) {
		tok, ok := bearer(r)
		if !ok {
			return Identity{}, ErrNoCredentials
		}
		// Digests have one length: the comparison says nothing of the
		// tokens' lengths either.
		sum := sha256.Sum256([]byte(tok))
		var found Identity
		match := 0
		for _, e := range table {
			if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
				found, match = e.id, 1
			}
		}
		if match == 0 {
			return Identity{}, ErrNoCredentials
		}
		return found, nil
	})
}

// bearer is the request's bearer token.
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	return tok, ok && strings.EqualFold(scheme, "Bearer") && tok != ""
}

// ClientCertificates authenticates a TLS client by its certificate (mTLS;
// ServerTLS with a ClientCAFile): identify maps the leaf of a chain the
// server verified to an identity, or refuses it. A certificate the server
// did not verify is no credential.
func ClientCertificates(identify func(*x509.Certificate) (Identity, bool)) Authenticator {
	return AuthenticatorFunc(func(r *http.Request) (Identity, error) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
			return Identity{}, ErrNoCredentials
		}
		leaf := r.TLS.VerifiedChains[0][0]
		id, ok := identify(leaf)
		if !ok {
			return Identity{}, fmt.Errorf("the client certificate of %q is not one this API knows", leaf.Subject.CommonName)
		}
		return id, nil
	})
}

type identityKey struct{}

// IdentityFrom is the identity a request was authenticated as (in its
// context, for a Submitter, say); false if the API is open.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// guard authenticates requests and authorizes them by their route's
// class: the routes registered through route, and no other.
type guard struct {
	auth    Authenticator // nil: the API is open
	peers   peering
	classes map[string]Permission // "<METHOD> <pattern>" → class
	logger  *slog.Logger          // refusals, at debug level
}

// route registers a route with its class.
func (g *guard) route(r chi.Router, p Permission, method, pattern string, h http.HandlerFunc) {
	g.classes[method+" "+pattern] = p
	r.Method(method, pattern, h)
}

// classified authorizes each request by the class of the route it
// matched; a route without one is refused, whoever asks.
func (g *guard) classified(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := chi.RouteContext(r.Context())
		p, ok := g.classes[r.Method+" "+rc.RoutePattern()]
		if !ok {
			problem(w, r, http.StatusForbidden, "forbidden", fmt.Sprintf("%s %s is in no permission's class: nobody may call it", r.Method, rc.RoutePattern()))
			return
		}
		if r, ok := g.admit(w, r, p); ok {
			next.ServeHTTP(w, r)
		}
	})
}

// require lets a request through if its caller has the permission.
func (g *guard) require(p Permission, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r, ok := g.admit(w, r, p); ok {
			next.ServeHTTP(w, r)
		}
	})
}

// admit is r with its caller's identity if the caller has the permission
// (or the API is open); otherwise it answers 401 if it cannot tell who
// the caller is, 403 if the caller lacks the permission.
func (g *guard) admit(w http.ResponseWriter, r *http.Request, p Permission) (*http.Request, bool) {
	if g.auth == nil {
		return r, true
	}
	id, err := g.peers.verify(r)
	if errors.Is(err, errNotPeer) {
		id, err = g.auth.Authenticate(r)
	}
	if err != nil {
		challenge := `Bearer realm="oxbow"`
		detail := "send credentials: Authorization: Bearer <token>"
		if !errors.Is(err, ErrNoCredentials) {
			challenge += `, error="invalid_token"`
			detail = "the credentials are refused: " + err.Error()
		}
		g.logger.Debug("httpapi: unauthenticated", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
		w.Header().Set("WWW-Authenticate", challenge)
		problem(w, r, http.StatusUnauthorized, "unauthorized", detail)
		return nil, false
	}
	if !id.Can(p) {
		g.logger.Debug("httpapi: forbidden", "method", r.Method, "path", r.URL.Path, "subject", id.Subject, "needs", p)
		problem(w, r, http.StatusForbidden, "forbidden", fmt.Sprintf("%s %s needs permission %q, which %q does not have", r.Method, r.URL.Path, p, id.Subject))
		return nil, false
	}
	return r.WithContext(context.WithValue(r.Context(), identityKey{}, id)), true
}
