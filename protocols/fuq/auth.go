package fuq

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"time"
)

// The plain TCP transport authenticates a worker before the first message,
// when the Foreman has a Secret, by a challenge and its answer, so that the
// secret itself never crosses the connection:
//
//	foreman → worker   "FUQAUTH1" and 32 random bytes (the challenge)
//	worker → foreman   HMAC-SHA256(secret, challenge): 32 bytes
//	foreman → worker   'K' (accepted) or 'N' (refused, then closed)
//
// The reference has no plain TCP transport (it speaks HTTPS and a
// websocket, where the login carries the secret), so this is ours alone.
// Every step has the connection's deadline.
const authMagic = "FUQAUTH1"

const (
	authNonce  = 32
	authAccept = 'K'
	authRefuse = 'N'
)

func authMAC(secret, nonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(nonce)
	return m.Sum(nil)
}

// authWorkerConn challenges the worker on conn and reports whether it
// answered with the secret.
func authWorkerConn(conn net.Conn, secret []byte, timeout time.Duration) error {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	challenge := make([]byte, len(authMagic)+authNonce)
	copy(challenge, authMagic)
	rand.Read(challenge[len(authMagic):]) // never fails
	if _, err := conn.Write(challenge); err != nil {
		return err
	}
	answer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, answer); err != nil {
		return fmt.Errorf("no answer to the challenge: %w", err)
	}
	if !hmac.Equal(answer, authMAC(secret, challenge[len(authMagic):])) {
		conn.Write([]byte{authRefuse})
		return fmt.Errorf("%w: wrong shared secret", ErrAuth)
	}
	_, err := conn.Write([]byte{authAccept})
	return err
}

// authForemanConn answers the foreman's challenge on conn with the secret.
func authForemanConn(conn net.Conn, secret []byte, timeout time.Duration) error {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	challenge := make([]byte, len(authMagic)+authNonce)
	if _, err := io.ReadFull(conn, challenge); err != nil {
		return fmt.Errorf("fuq: waiting for the foreman's challenge: %w", err)
	}
	if string(challenge[:len(authMagic)]) != authMagic {
		return &ProtocolError{Msg: "the foreman sent no challenge: it takes no secret, or is not a foreman"}
	}
	if _, err := conn.Write(authMAC(secret, challenge[len(authMagic):])); err != nil {
		return err
	}
	var verdict [1]byte
	if _, err := io.ReadFull(conn, verdict[:]); err != nil {
		return fmt.Errorf("fuq: waiting for the foreman's verdict: %w", err)
	}
	if verdict[0] != authAccept {
		return fmt.Errorf("%w: wrong shared secret", ErrAuth)
	}
	return nil
}
