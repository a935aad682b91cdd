// Package testpki makes certificates for the tests of TLS: a CA, and the
// certificates it signs (or self-signed ones), as PEM files and loaded.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority for a test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA's certificate as a PEM file.
	File string
}

// NewCA makes a CA, its file in the test's temporary directory.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := template("oxbow test CA")
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	self := create(tb, tmpl, tmpl, key, key)
	ca := &CA{key: key, Cert: self.Cert, File: filepath.Join(tb.TempDir(), "ca.pem")}
	self.WriteFiles(tb, ca.File, "")
	return ca
}

// Pool is a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is an issued certificate and its key: PEM, loaded, and as files.
type Leaf struct {
	Cert              *x509.Certificate
	CertPEM, KeyPEM   []byte
	TLS               tls.Certificate
	CertFile, KeyFile string
}

// Issue makes a certificate for cn, good for a server at 127.0.0.1 and
// localhost and for a client, signed by the CA, with a random serial.
func (ca *CA) Issue(tb testing.TB, cn string) *Leaf {
	tb.Helper()
	return create(tb, leafTemplate(cn), ca.Cert, newKey(tb), ca.key).files(tb, cn)
}

// SelfSigned makes a certificate as Issue does, signed by its own key.
func SelfSigned(tb testing.TB, cn string) *Leaf {
	tb.Helper()
	key := newKey(tb)
	tmpl := leafTemplate(cn)
	return create(tb, tmpl, tmpl, key, key).files(tb, cn)
}

// WriteFiles writes the certificate and the key (if keyFile is not "")
// to files, each replaced at once (a rename), as a rotation does.
func (l *Leaf) WriteFiles(tb testing.TB, certFile, keyFile string) {
	tb.Helper()
	Replace(tb, certFile, l.CertPEM)
	if keyFile != "" {
		Replace(tb, keyFile, l.KeyPEM)
	}
}

// Replace writes a file at once: a new file renamed over the old one.
func Replace(tb testing.TB, file string, b []byte) {
	tb.Helper()
	tmp := file + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		tb.Fatal(err)
	}
}

func (l *Leaf) files(tb testing.TB, cn string) *Leaf {
	dir := tb.TempDir()
	l.CertFile, l.KeyFile = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+".key")
	l.WriteFiles(tb, l.CertFile, l.KeyFile)
	return l
}

func template(cn string) *x509.Certificate {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return &x509.Certificate{SerialNumber: n, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
}

func leafTemplate(cn string) *x509.Certificate {
	t := template(cn)
	t.KeyUsage = x509.KeyUsageDigitalSignature
	t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	t.IPAddresses, t.DNSNames = []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"}
	return t
}

// create signs tmpl with signer as parent.
func create(tb testing.TB, tmpl, parent *x509.Certificate, key, signer *ecdsa.PrivateKey) *Leaf {
	tb.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		tb.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	l := &Leaf{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})}
	if l.Cert, err = x509.ParseCertificate(der); err != nil {
		tb.Fatal(err)
	}
	if l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		tb.Fatal(err)
	}
	return l
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}
