package httpapi_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/testpki"
	"github.com/oxbow-dev/oxbow/projection"
)

// serverFiles writes a new server certificate of the CA, and its key,
// into dir (replacing those there): the files, and the certificate.
func serverFiles(t *testing.T, ca *testpki.CA, dir string) (httpapi.TLSFiles, *x509.Certificate) {
	t.Helper()
	l := ca.Issue(t, "localhost")
	f := httpapi.TLSFiles{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	l.WriteFiles(t, f.CertFile, f.KeyFile)
	return f, l.Cert
}

// start serves h with NewServer (as changed by edit) on a loopback port,
// over TLS with tlsCfg if set; the server is closed when the test ends.
func start(t *testing.T, h http.Handler, tlsCfg *tls.Config, edit func(*http.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.NewServer(ln.Addr().String(), h)
	srv.TLSConfig = tlsCfg
	srv.ErrorLog = log.New(io.Discard, "", 0) // handshakes the tests break off
	if edit != nil {
		edit(srv)
	}
	done := make(chan error, 1)
	go func() {
		if tlsCfg != nil {
			done <- srv.ServeTLS(ln, "", "")
		} else {
			done <- srv.Serve(ln)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// A certificate replaced on disk is served to the next connections, with
// no restart; files that do not load leave the last good pair in use.
func TestServerTLSReloads(t *testing.T) {
	p := testpki.NewCA(t)
	dir := t.TempDir()
	files, first := serverFiles(t, p, dir)
	logs := &syncBuffer{}
	files.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg, err := httpapi.ServerTLS(files)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("min version %x", cfg.MinVersion)
	}
	in, reg := shop(t)
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg})
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, h, cfg, nil)
	served := func() *big.Int {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if s := served(); s.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("serial %v, want %v", s, first.SerialNumber)
	}
	_, second := serverFiles(t, p, dir)
	await.Until(t, 5*time.Second, "the new certificate", func() bool { return served().Cmp(second.SerialNumber) == 0 })
	testpki.Replace(t, files.CertFile, []byte("-----BEGIN CERTIFICATE-----\nhalf"))
	await.Until(t, 5*time.Second, "the broken certificate noticed", func() bool {
		served()
		return strings.Contains(logs.String(), "do not load")
	})
	if s := served(); s.Cmp(second.SerialNumber) != 0 {
		t.Errorf("after a broken file, serial %v, want %v", s, second.SerialNumber)
	}
	if _, err := httpapi.ServerTLS(httpapi.TLSFiles{CertFile: files.CertFile, KeyFile: files.KeyFile}); err == nil {
		t.Error("ServerTLS accepted a broken certificate")
	}
}

// Client certificates: one the server verified identifies its client; one
// it did not is no credential; and a request that came over TLS is
// forwarded over TLS.
func TestClientCertificates(t *testing.T) {
	p := testpki.NewCA(t)
	robot, stranger := p.Issue(t, "robot").TLS, testpki.SelfSigned(t, "robot").TLS
	in, reg := shop(t)
	auth := httpapi.FirstOf(httpapi.ClientCertificates(func(c *x509.Certificate) (httpapi.Identity, bool) {
		id, ok := map[string]httpapi.Identity{"robot": {Subject: "robot", Permissions: []httpapi.Permission{httpapi.ReadViews}}}[c.Subject.CommonName]
		return id, ok
	}), httpapi.Tokens(tokens))
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Authenticator: auth, PeerSecret: []byte(peerSecret)})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(clientAuth tls.ClientAuthType) string {
		files, _ := serverFiles(t, p, t.TempDir())
		files.ClientCAFile, files.ClientAuth = p.File, clientAuth
		cfg, err := httpapi.ServerTLS(files)
		if err != nil {
			t.Fatal(err)
		}
		return start(t, h, cfg, nil)
	}
	verifying, requesting := serve(0), serve(tls.RequestClientCert)
	get := func(addr, path string, cert *tls.Certificate) (int, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.Pool()}}
		defer tr.CloseIdleConnections()
		if cert != nil { // sent whatever CAs the server names
			tr.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		resp, err := (&http.Client{Transport: tr}).Get("https://" + addr + path)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, c := range []struct {
		name, addr, path string
		cert             *tls.Certificate
		status           int
	}{
		{"verified", verifying, "/views", &robot, 200},
		{"verified, without the permission", verifying, "/status", &robot, 403},
		{"no certificate", verifying, "/views", nil, 401},
		{"not verified", requesting, "/views", &robot, 401},
		{"self-signed, not verified", requesting, "/views", &stranger, 401},
	} {
		if status, err := get(c.addr, c.path, c.cert); err != nil || status != c.status {
			t.Errorf("%s: %d %v, want %d", c.name, status, err, c.status)
		}
	}
	if status, err := get(verifying, "/views", &stranger); err == nil {
		t.Errorf("a certificate of another CA: %d, want a failed handshake", status)
	}

	// Forwarding over TLS: the owner serves TLS only.
	owner := verifying
	front, err := httpapi.New(httpapi.Config{Instance: &remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "i3"}, owner: owner}, Views: reg,
		Authenticator: auth, PeerSecret: []byte(peerSecret), Client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.Pool()}}}})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := serverFiles(t, p, t.TempDir())
	cfg, err := httpapi.ServerTLS(files)
	if err != nil {
		t.Fatal(err)
	}
	frontAddr := start(t, front, cfg, nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.Pool()}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://"+frontAddr+"/views/stock/keys/red", nil)
	req.Header.Set("Authorization", "Bearer tok-reader-91c2")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Oxbow-Served-By") != "i2" {
		t.Errorf("forwarded over TLS: %d %s", resp.StatusCode, body)
	}
}

// NewServer's limits: its defaults, 431 for headers past 64 KiB, and a
// client that sends its headers too slowly is cut off after 5 seconds.
func TestNewServer(t *testing.T) {
	in, reg := shop(t)
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.NewServer(":8080", h)
	if srv.ReadHeaderTimeout != 5*time.Second || srv.ReadTimeout != 30*time.Second || srv.WriteTimeout != 0 || srv.IdleTimeout != 2*time.Minute || srv.MaxHeaderBytes != 64<<10 {
		t.Errorf("limits %+v", srv)
	}
	addr := start(t, h, nil, nil)
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("100 KiB of headers: %d", resp.StatusCode)
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	began := time.Now()
	stop := make(chan struct{})
	wrote := make(chan struct{})
	go func() { // the slow client: a byte every 100ms, until cut off
		defer close(wrote)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for _, b := range []byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 1000)) {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{b}); err != nil {
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.Copy(io.Discard, conn) // until the server closes the connection
	cut := time.Since(began)
	close(stop)
	<-wrote
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept a slow client for 30s")
	}
	// Cut off (above), and not before its 5 seconds: a limit, not a
	// measure of speed.
	if cut < 5*time.Second-100*time.Millisecond {
		t.Errorf("a slow client was cut off after %v, before the 5s it is allowed", cut)
	}
}

// A change feed outlives the server's ReadTimeout.
func TestFeedOutlivesReadTimeout(t *testing.T) {
	env, topic, top, _ := kvTable(t, "http-feed-timeout", 1)
	a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Brokers: env.Brokers})
	view, _ := projection.NewKeyValue("kv", "kv", serde.String, serde.Int64)
	views, _ := projection.NewRegistry(view)
	h, err := httpapi.New(httpapi.Config{Instance: a, Views: views, Brokers: env.Brokers, Heartbeat: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	const timeout = 200 * time.Millisecond
	addr := start(t, h, nil, func(s *http.Server) { s.ReadTimeout = timeout })
	resp, err := http.Get("http://" + addr + "/views/kv/changes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	opened := time.Now()
	sc := bufio.NewScanner(resp.Body)
	for time.Since(opened) < 5*timeout {
		if !sc.Scan() {
			t.Fatalf("the feed ended after %v (ReadTimeout %v): %v", time.Since(opened), timeout, sc.Err())
		}
	}
}
