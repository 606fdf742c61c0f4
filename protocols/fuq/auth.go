package fuq

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The plain TCP transport authenticates both ends before the first
// message, when the Foreman has a Secret, so that the secret itself never
// crosses the connection and a worker takes commands only from a foreman
// that holds it (not from a program that took the foreman's port while it
// was down):
//
//	foreman → worker   "FUQAUTH2" and 32 random bytes (its nonce)
//	worker → foreman   32 random bytes (its nonce), then
//	                   HMAC-SHA256(secret, "fuq worker\x00" nonces): 32 bytes
//	foreman → worker   'K' and HMAC-SHA256(secret, "fuq foreman\x00" nonces),
//	                   or 'N' (refused, then closed)
//
// where the nonces are the foreman's then the worker's. A worker refuses
// "FUQAUTH1", the one-way challenge of earlier versions (the worker
// proved itself, the foreman did not): whoever answers on the foreman's
// address could send it. The reference has no plain TCP transport (it
// speaks HTTPS and a websocket, where the login carries the secret), so
// this is ours alone. Every step has the connection's deadline.
const (
	authMagic = "FUQAUTH2"
	// authMagicOneWay is the challenge of a foreman from before the
	// foreman proved itself too.
	authMagicOneWay = "FUQAUTH1"
)

const (
	authNonce  = 32
	authAccept = 'K'
	authRefuse = 'N'
)

// ErrForemanUnproven is returned (wrapped) by Worker.Run when the foreman
// did not prove that it holds the shared secret: another program answers
// on its address, the foreman has another secret, or it is of a version
// that does not prove itself. The worker sent it nothing but its proof.
var ErrForemanUnproven = errors.New("fuq: the foreman did not prove it holds the shared secret")

// authMAC is the proof of side ("worker" or "foreman") over the foreman's
// nonce and then the worker's.
func authMAC(secret []byte, side string, foremanNonce, workerNonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("fuq " + side + "\x00"))
	m.Write(foremanNonce)
	m.Write(workerNonce)
	return m.Sum(nil)
}

// authWorkerConn challenges the worker on conn, reports whether it proved
// it holds the secret, and proves to it that the foreman does.
func authWorkerConn(conn net.Conn, secret []byte, timeout time.Duration) error {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	challenge := make([]byte, len(authMagic)+authNonce)
	copy(challenge, authMagic)
	nonce := challenge[len(authMagic):]
	rand.Read(nonce) // never fails
	if _, err := conn.Write(challenge); err != nil {
		return err
	}
	answer := make([]byte, authNonce+sha256.Size)
	if _, err := io.ReadFull(conn, answer); err != nil {
		return fmt.Errorf("no answer to the challenge: %w", err)
	}
	workerNonce := answer[:authNonce]
	if !hmac.Equal(answer[authNonce:], authMAC(secret, "worker", nonce, workerNonce)) {
		conn.Write([]byte{authRefuse})
		return fmt.Errorf("%w: wrong shared secret", ErrAuth)
	}
	_, err := conn.Write(append([]byte{authAccept}, authMAC(secret, "foreman", nonce, workerNonce)...))
	return err
}

// authForemanConn answers the foreman's challenge on conn with a proof of
// the secret, and checks the foreman's proof of it.
func authForemanConn(conn net.Conn, secret []byte, timeout time.Duration) error {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	challenge := make([]byte, len(authMagic)+authNonce)
	if _, err := io.ReadFull(conn, challenge); err != nil {
		return fmt.Errorf("fuq: waiting for the foreman's challenge: %w", err)
	}
	switch string(challenge[:len(authMagic)]) {
	case authMagic:
	case authMagicOneWay:
		return fmt.Errorf("%w: it asks for a one-way proof (a foreman from before the foreman proved itself; upgrade it)", ErrForemanUnproven)
	default:
		return &ProtocolError{Msg: "the foreman sent no challenge: it takes no secret, or is not a foreman"}
	}
	foremanNonce := challenge[len(authMagic):]
	answer := make([]byte, authNonce, authNonce+sha256.Size)
	rand.Read(answer) // never fails
	answer = append(answer, authMAC(secret, "worker", foremanNonce, answer)...)
	if _, err := conn.Write(answer); err != nil {
		return err
	}
	var verdict [1]byte
	if _, err := io.ReadFull(conn, verdict[:]); err != nil {
		return fmt.Errorf("fuq: waiting for the foreman's verdict: %w", err)
	}
	if verdict[0] != authAccept {
		return fmt.Errorf("%w: wrong shared secret", ErrAuth)
	}
	proof := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, proof); err != nil {
		return fmt.Errorf("fuq: waiting for the foreman's proof: %w", err)
	}
	if !hmac.Equal(proof, authMAC(secret, "foreman", foremanNonce, answer[:authNonce])) {
		return fmt.Errorf("%w: its proof is wrong (another program on its address, or another secret)", ErrForemanUnproven)
	}
	return nil
}
