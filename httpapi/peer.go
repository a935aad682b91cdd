package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The headers of a request one instance sends another (besides
// ForwardedHeader and VersionHeader): the caller's identity, and the
// signature that vouches for it.
const (
	callerHeader    = "Oxbow-Caller"    // base64url of the Identity's JSON
	signatureHeader = "Oxbow-Signature" // t=<unix seconds>,v1=<base64url HMAC-SHA256>
)

// peerWindow is how far a signature's time may be from the receiver's
// clock.
const peerWindow = time.Minute

// errNotPeer: the request is not one from another instance, or is one
// whose caller must be authenticated by its credentials (no PeerSecret).
var errNotPeer = errors.New("httpapi: not from a peer")

// peering is how instances vouch for the callers of the requests they
// send each other: with a shared secret, an instance signs what it asks
// and who for; without one, it passes the caller's credentials on.
type peering struct {
	secret []byte
	now    func() time.Time
}

// mac is the signature of a peer request's parts.
func (p peering) mac(t int64, method, uri string, h http.Header) string {
	m := hmac.New(sha256.New, p.secret)
	for _, f := range []string{strconv.FormatInt(t, 10), method, uri, h.Get(ForwardedHeader), h.Get(scanLocalHeader), h.Get(callerHeader), h.Get(VersionHeader), h.Get(VersionForwardedHeader)} {
		m.Write([]byte(f))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sign makes req, another instance's part of r, speak for r's caller.
func (p peering) sign(req, r *http.Request) error {
	id, ok := IdentityFrom(r.Context())
	if !ok || len(p.secret) == 0 {
		if auth := r.Header.Get("Authorization"); auth != "" {
			req.Header.Set("Authorization", auth)
		}
		return nil
	}
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	req.Header.Set(callerHeader, base64.RawURLEncoding.EncodeToString(b))
	t := p.now().Unix()
	req.Header.Set(signatureHeader, fmt.Sprintf("t=%d,v1=%s", t, p.mac(t, req.Method, req.URL.RequestURI(), req.Header)))
	return nil
}

// verify is the identity a request from another instance speaks for:
// errNotPeer if it is none (or, without a PeerSecret, one to
// authenticate by the caller's credentials it carries), another error if
// it claims to be one and cannot prove it.
func (p peering) verify(r *http.Request) (Identity, error) {
	h := r.Header
	signed := h.Get(callerHeader) != "" || h.Get(signatureHeader) != ""
	if !signed && h.Get(ForwardedHeader) == "" && h.Get(scanLocalHeader) == "" && h.Get(VersionForwardedHeader) == "" {
		return Identity{}, errNotPeer
	}
	if len(p.secret) == 0 {
		if signed {
			return Identity{}, fmt.Errorf("%s and %s are accepted only between instances given a PeerSecret", callerHeader, signatureHeader)
		}
		return Identity{}, errNotPeer
	}
	var ts, sig string
	for part := range strings.SplitSeq(h.Get(signatureHeader), ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return Identity{}, fmt.Errorf("a request from another instance needs %s: t=<unix seconds>,v1=<signature>", signatureHeader)
	}
	if d := p.now().Sub(time.Unix(t, 0)); d > peerWindow || d < -peerWindow {
		return Identity{}, fmt.Errorf("%s is %v away from this instance's clock (at most %v)", signatureHeader, d.Round(time.Second), peerWindow)
	}
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	if !hmac.Equal([]byte(sig), []byte(p.mac(t, r.Method, uri, h))) {
		return Identity{}, fmt.Errorf("%s does not match the request", signatureHeader)
	}
	b, err := base64.RawURLEncoding.DecodeString(h.Get(callerHeader))
	var id Identity
	if err == nil {
		err = json.Unmarshal(b, &id)
	}
	if err != nil || id.Subject == "" {
		return Identity{}, fmt.Errorf("%s names no caller", callerHeader)
	}
	return id, nil
}

// peerRequest is the request another instance, at addr, is asked on
// behalf of r: marked with this instance's id under the header as (
// ForwardedHeader, scanLocalHeader), in the same version and trace, for
// the same caller; over TLS if r came over it.
func (a *api) peerRequest(r *http.Request, addr, as string) (*http.Request, error) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	target := url.URL{Scheme: scheme, Host: addr, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(as, a.cfg.Instance.ID())
	if a.cfg.Version != "" {
		req.Header.Set(VersionHeader, a.cfg.Version)
	}
	for _, h := range []string{"Accept", "traceparent", "tracestate"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	return req, a.guard.peers.sign(req, r)
}
