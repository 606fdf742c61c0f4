package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/fuq"
)

// webFlags are the flags of -foreman.
type webFlags struct {
	url, ca, certName, auth, node string
}

// dialer returns the WebDialer the flags describe, or nil without
// -foreman.
func (f webFlags) dialer() (*fuq.WebDialer, error) {
	if f.url == "" {
		if f.ca != "" || f.certName != "" || f.auth != "" || f.node != "" {
			return nil, cli.Usagef("-ca, -certname, -auth-file and -node go with -foreman")
		}
		return nil, nil
	}
	auth, err := fuq.LoadAuth(f.auth)
	if errors.Is(err, fuq.ErrNoAuth) {
		return nil, cli.Usagef("-foreman needs the shared secret: -auth-file FILE, or $%s", fuq.AuthEnv)
	}
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{ServerName: f.certName, MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", f.ca)
		}
	}
	return &fuq.WebDialer{URL: f.url, TLS: tc, Auth: auth, Node: f.node}, nil
}
