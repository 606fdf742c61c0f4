package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/protocols/fuq"
)

// webFlags are the flags of -foreman.
type webFlags struct {
	url, ca, certName, auth, node string
}

// loadSecret returns the foreman's shared secret: from -auth-file, else
// $FUQ_AUTH, else the token file a foreman of this user keeps in the state
// directory (fuq.token).
func loadSecret(file string) ([]byte, error) {
	if file != "" {
		return fuq.ReadAuth(file)
	}
	tok, err := secret.Find("fuq", fuq.AuthEnv)
	if errors.Is(err, secret.ErrNoSecret) {
		return nil, cli.Usagef("the foreman's shared secret is needed: -auth-file FILE (a copy of the foreman's fuq.token, "+
			"or fuqsrv.conf), or $%s (%v)", fuq.AuthEnv, err)
	}
	return []byte(tok), err
}

// dialer returns the WebDialer the flags describe, or nil without
// -foreman.
func (f webFlags) dialer(auth []byte) (*fuq.WebDialer, error) {
	if f.url == "" {
		if f.ca != "" || f.certName != "" || f.node != "" {
			return nil, cli.Usagef("-ca, -certname and -node go with -foreman")
		}
		return nil, nil
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
