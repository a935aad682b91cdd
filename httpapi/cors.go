package httpapi

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/cors"
)

// CORS lets browsers on other origins call the API (Config.CORS). A
// preflight request is answered before authentication: it carries no
// credentials.
type CORS struct {
	// AllowedOrigins are the origins allowed, as "https://app.example.com"
	// ("*" in one for any run of characters; "*" alone for every origin).
	// Required.
	AllowedOrigins []string
	// AllowCredentials lets browsers send cookies and client certificates
	// (not with the origin "*"; default: false).
	AllowCredentials bool
	// MaxAge is how long a browser may keep a preflight's answer (default:
	// none).
	MaxAge time.Duration
}

// handler is the CORS middleware: the methods and request headers the API
// uses, and the response headers it sets.
func (c *CORS) handler() (func(http.Handler) http.Handler, error) {
	switch {
	case len(c.AllowedOrigins) == 0:
		return nil, errors.New("httpapi: CORS.AllowedOrigins is empty; name the origins allowed")
	case c.AllowCredentials && slices.Contains(c.AllowedOrigins, "*"):
		return nil, errors.New(`httpapi: CORS.AllowCredentials with the origin "*" would let every site call the API as its users`)
	}
	return cors.Handler(cors.Options{
		AllowedOrigins: c.AllowedOrigins,
		AllowedMethods: []string{http.MethodGet, http.MethodHead, http.MethodPost},
		AllowedHeaders: []string{"Authorization", "Content-Type", "If-Match", "Idempotency-Key", "Last-Event-ID",
			VersionHeader, "Oxbow-Correlation-Id", "traceparent", "tracestate"},
		ExposedHeaders:   []string{"ETag", VersionHeader, "Oxbow-Served-By", "Retry-After", "WWW-Authenticate", "Allow"},
		AllowCredentials: c.AllowCredentials,
		MaxAge:           int(c.MaxAge / time.Second),
	}), nil
}
