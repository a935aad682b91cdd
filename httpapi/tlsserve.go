package httpapi

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"
)

// TLSFiles are the files a server's TLS configuration is read from.
type TLSFiles struct {
	// CertFile and KeyFile are the server's certificate (chain) and key,
	// PEM; both required. They are read again when they change.
	CertFile, KeyFile string
	// ClientCAFile, if set, holds the CA certificates (PEM) client
	// certificates are verified against, as ClientAuth asks (read once).
	ClientCAFile string
	// ClientAuth is what a client must show (default: nothing; with a
	// ClientCAFile, tls.VerifyClientCertIfGiven, so that clients with a
	// certificate are identified by it and others by their tokens).
	ClientAuth tls.ClientAuthType
	// Logger is told of reloads, and of changed files that do not load
	// (their names only; default: discarded).
	Logger *slog.Logger
}

// ServerTLS is a TLS configuration for a server (NewServer's TLSConfig),
// at least TLS 1.2, whose certificate is read again from its files when
// they change, checked at most once a second: a certificate renewed on
// disk is served to the next connections, with no restart. Files that do
// not load (half written, a new certificate with the old key) keep the
// last good pair in use.
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("httpapi: TLSFiles needs CertFile and KeyFile")
	}
	pair, err := newReloading(f.Logger, func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		return &c, err
	}, f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("httpapi: the server's certificate: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		ClientAuth:     f.ClientAuth,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.get(), nil },
	}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("httpapi: the client CAs: %w", err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("httpapi: the client CAs: no certificate in %s", f.ClientCAFile)
		}
		if cfg.ClientAuth == tls.NoClientCert {
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return cfg, nil
}

// NewServer is an http.Server for the API with limits fit to face the
// internet: 5 seconds to send a request's headers, 64 KiB of them (431
// past), 30 seconds to send its body, 2 minutes idle between requests, and
// no bound on writing an answer (change feeds last). Serve TLS by setting
// its TLSConfig (ServerTLS) and calling ServeTLS or ListenAndServeTLS
// with no file names.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}
