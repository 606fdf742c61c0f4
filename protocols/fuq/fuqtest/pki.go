// Package fuqtest holds what tests of fuq's HTTPS transport need: a
// certificate authority and a certificate for localhost, made on the spot.
//
//	pki := fuqtest.NewPKI(t)
//	go f.ServeWeb(ctx, ln, fuq.WebConfig{Auth: secret, TLS: pki.Server})
//	w := &fuq.Worker{Web: &fuq.WebDialer{URL: "https://" + ln.Addr().String(), TLS: pki.Client, Auth: secret}}
package fuqtest

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

	"github.com/stretchr/testify/require"
)

// PKI is a certificate authority and a certificate it signed for
// localhost and 127.0.0.1, made for one test, as the reference's users
// make theirs with openssl. Dir holds their PEM files: ca.crt, fuq.crt
// and fuq.key. The configurations are fresh: a caller may change them.
type PKI struct {
	Server *tls.Config // the certificate, to serve HTTPS
	Client *tls.Config // the CA as RootCAs
	Dir    string
}

// NewPKI makes a PKI, its files in t.TempDir(); it fails t on an error.
func NewPKI(t testing.TB) PKI {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "laboro test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)

	p := PKI{Dir: t.TempDir()}
	write := func(name, typ string, der []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(p.Dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	}
	write("ca.crt", "CERTIFICATE", caDER)
	write("fuq.crt", "CERTIFICATE", der)
	write("fuq.key", "EC PRIVATE KEY", keyDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	p.Server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	p.Client = &tls.Config{RootCAs: pool}
	return p
}
