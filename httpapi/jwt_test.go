package httpapi_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/testpki"
)

// signingKey is a private key with its id and algorithm.
type signingKey struct {
	kid string
	alg jose.SignatureAlgorithm
	key crypto.Signer
}

func newSigningKeys(t *testing.T) (es, rs, ed, other signingKey) {
	t.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, ek, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec2, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signingKey{"ec-1", jose.ES256, ec}, signingKey{"rsa-1", jose.RS256, rk}, signingKey{"ed-1", jose.EdDSA, ek}, signingKey{"ec-2", jose.ES256, ec2}
}

// writeJWKS writes the keys' public halves as a JWKS file.
func writeJWKS(t *testing.T, file string, keys ...signingKey) {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.key.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	testpki.Replace(t, file, b)
}

// sign makes a JWT of claims signed by k, under kid.
func (k signingKey) sign(t *testing.T, kid string, claims map[string]any) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// unsigned makes a token of header and claims with the signature made by
// sign (none: empty).
func unsigned(header, claims map[string]any, sign func(input string) []byte) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	input := enc(header) + "." + enc(claims)
	return input + "." + base64.RawURLEncoding.EncodeToString(sign(input))
}

// JWTs are verified against the JWKS file's keys, by their algorithms
// (RS256, ES256, EdDSA; never none or HS*), times, issuer and audience;
// their claims make the identity; a new JWKS file rotates the keys.
func TestJWT(t *testing.T) {
	es, rs, ed, other := newSigningKeys(t)
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, file, es, rs, ed)
	log := &syncBuffer{}
	auth, err := httpapi.JWT(httpapi.JWTConfig{JWKSFile: file, Issuer: "https://idp.example.com", Audience: "oxbow", Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	in, reg := shop(t)
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Authenticator: auth})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := func(edit func(map[string]any)) map[string]any {
		c := map[string]any{"iss": "https://idp.example.com", "aud": []string{"oxbow", "other"}, "sub": "alice",
			"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "oxbow_permissions": []string{"read"}}
		if edit != nil {
			edit(c)
		}
		return c
	}
	pub, _ := x509.MarshalPKIXPublicKey(es.key.Public())
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	hs256 := func(input string) []byte {
		m := hmac.New(sha256.New, pubPEM)
		m.Write([]byte(input))
		return m.Sum(nil)
	}
	for _, c := range []struct {
		name, path, token string
		status            int
		detail            string
	}{
		{"ES256", "/views", es.sign(t, es.kid, claims(nil)), 200, ""},
		{"RS256", "/views", rs.sign(t, rs.kid, claims(nil)), 200, ""},
		{"EdDSA", "/views", ed.sign(t, ed.kid, claims(nil)), 200, ""},
		{"read only", "/status", es.sign(t, es.kid, claims(nil)), 403, `needs permission \"operate\", which \"alice\" does not have`},
		{"permissions as a string", "/status", es.sign(t, es.kid, claims(func(c map[string]any) { c["oxbow_permissions"] = "read operate" })), 200, ""},
		{"expired", "/views", es.sign(t, es.kid, claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() })), 401, "expired"},
		{"not yet valid", "/views", es.sign(t, es.kid, claims(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() })), 401, "not valid yet"},
		{"no expiry", "/views", es.sign(t, es.kid, claims(func(c map[string]any) { delete(c, "exp") })), 401, "no expiry"},
		{"wrong issuer", "/views", es.sign(t, es.kid, claims(func(c map[string]any) { c["iss"] = "https://evil.example.com" })), 401, "issuer"},
		{"wrong audience", "/views", es.sign(t, es.kid, claims(func(c map[string]any) { c["aud"] = "other" })), 401, "audience"},
		{"no subject", "/views", es.sign(t, es.kid, claims(func(c map[string]any) { delete(c, "sub") })), 401, "no subject"},
		{"a key not in the JWKS", "/views", other.sign(t, other.kid, claims(nil)), 401, "not signed by a key"},
		{"a key not in the JWKS, under a kid in it", "/views", other.sign(t, es.kid, claims(nil)), 401, "not signed by a key"},
		{"alg none", "/views", unsigned(map[string]any{"alg": "none", "typ": "JWT"}, claims(nil), func(string) []byte { return nil }), 401, "not a JWT signed by"},
		{"HS256 with the public key as secret", "/views", unsigned(map[string]any{"alg": "HS256", "typ": "JWT", "kid": es.kid}, claims(nil), hs256), 401, "not a JWT signed by"},
		{"not a JWT", "/views", "opaque-token", 401, "send credentials"},
	} {
		rec := call(h, http.MethodGet, c.path, c.token)
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.detail) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, rec.Code, rec.Body, c.status, c.detail)
		}
		if strings.Contains(rec.Body.String(), c.token) {
			t.Errorf("%s: the answer holds the token: %s", c.name, rec.Body)
		}
		if rec.Code == 401 && (c.detail == "send credentials") == strings.Contains(rec.Header().Get("WWW-Authenticate"), "invalid_token") {
			t.Errorf("%s: challenge %q", c.name, rec.Header().Get("WWW-Authenticate"))
		}
	}

	// Rotation: a new JWKS file takes effect within a second or so; one
	// that does not parse leaves the keys as they were.
	oldTok, newTok := es.sign(t, es.kid, claims(nil)), other.sign(t, other.kid, claims(nil))
	writeJWKS(t, file, other)
	await.Until(t, 5*time.Second, "the rotated JWKS", func() bool { return call(h, http.MethodGet, "/views", newTok).Code == 200 })
	if rec := call(h, http.MethodGet, "/views", oldTok); rec.Code != 401 {
		t.Errorf("a key rotated out: %d %s", rec.Code, rec.Body)
	}
	testpki.Replace(t, file, []byte(`{"keys": [`))
	await.Until(t, 5*time.Second, "the broken JWKS noticed", func() bool {
		call(h, http.MethodGet, "/views", newTok)
		return strings.Contains(log.String(), "do not load")
	})
	if rec := call(h, http.MethodGet, "/views", newTok); rec.Code != 200 {
		t.Errorf("a broken JWKS file replaced the keys: %d %s", rec.Code, rec.Body)
	}
}
