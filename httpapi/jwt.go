package httpapi

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// JWTConfig configures JWT.
type JWTConfig struct {
	// JWKSFile is a JSON Web Key Set of the issuer's public keys, read
	// again when it changes (checked at most once a second), so that keys
	// rotate without a restart; required.
	JWKSFile string
	// Issuer and Audience are the iss a token must have and an aud it
	// must name; required.
	Issuer, Audience string
	// PermissionsClaim names the claim that holds the token's
	// permissions: an array of them, or a string of them separated by
	// spaces (default: "oxbow_permissions").
	PermissionsClaim string
	// SubjectClaim names the claim that holds the identity's subject
	// (default: "sub").
	SubjectClaim string
	// Leeway is the clock skew allowed in checking exp and nbf (default:
	// none).
	Leeway time.Duration
	// Logger is told of the JWKS file's reloads (default: discarded).
	Logger *slog.Logger
}

// jwtAlgorithms are the signatures accepted: asymmetric only, so that no
// public key can serve as an HMAC secret, and never "none".
var jwtAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA}

// JWT authenticates bearer tokens that are JWTs signed (RS256, ES256 or
// EdDSA) by a key of the JWKS file, current (exp required, nbf), of the
// Issuer and for the Audience. A bearer token that is not a JWT is
// ErrNoCredentials.
func JWT(cfg JWTConfig) (Authenticator, error) {
	if cfg.JWKSFile == "" || cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("httpapi: JWTConfig needs JWKSFile, Issuer and Audience")
	}
	if cfg.PermissionsClaim == "" {
		cfg.PermissionsClaim = "oxbow_permissions"
	}
	if cfg.SubjectClaim == "" {
		cfg.SubjectClaim = "sub"
	}
	keys, err := newReloading(cfg.Logger, func() ([]jose.JSONWebKey, error) { return loadJWKS(cfg.JWKSFile) }, cfg.JWKSFile)
	if err != nil {
		return nil, fmt.Errorf("httpapi: the JWKS: %w", err)
	}
	return AuthenticatorFunc(func(r *http.Request) (Identity, error) {
		tok, ok := bearer(r)
		if !ok || strings.Count(tok, ".") != 2 {
			return Identity{}, ErrNoCredentials
		}
		parsed, err := jwt.ParseSigned(tok, jwtAlgorithms)
		if err != nil {
			return Identity{}, fmt.Errorf("the token is not a JWT signed by RS256, ES256 or EdDSA: %w", err)
		}
		h := parsed.Headers[0]
		var std jwt.Claims
		var claims map[string]any
		verified := false
		for _, k := range keys.get() {
			if (h.KeyID == "" || k.KeyID == h.KeyID) && (k.Algorithm == "" || k.Algorithm == h.Algorithm) {
				if parsed.Claims(k.Key, &std, &claims) == nil {
					verified = true
					break
				}
			}
		}
		switch {
		case !verified:
			return Identity{}, errors.New("the token is not signed by a key of the issuer's")
		case std.Expiry == nil:
			return Identity{}, errors.New("the token has no expiry (exp)")
		}
		if err := std.ValidateWithLeeway(jwt.Expected{Issuer: cfg.Issuer, AnyAudience: jwt.Audience{cfg.Audience}, Time: time.Now()}, cfg.Leeway); err != nil {
			return Identity{}, fmt.Errorf("the token: %w", err)
		}
		id := Identity{}
		id.Subject, _ = claims[cfg.SubjectClaim].(string)
		if id.Subject == "" {
			return Identity{}, fmt.Errorf("the token names no subject (%s)", cfg.SubjectClaim)
		}
		switch ps := claims[cfg.PermissionsClaim].(type) {
		case string:
			for _, p := range strings.Fields(ps) {
				id.Permissions = append(id.Permissions, Permission(p))
			}
		case []any:
			for _, p := range ps {
				if s, ok := p.(string); ok {
					id.Permissions = append(id.Permissions, Permission(s))
				}
			}
		}
		return id, nil
	}), nil
}

// loadJWKS reads a JWKS file's public signing keys (of a private key, its
// public half).
func loadJWKS(file string) ([]jose.JSONWebKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []jose.JSONWebKey
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		k = k.Public()
		switch k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no public signing key", file)
	}
	return out, nil
}
