package jetstream

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// A program that holds the server's address while the server is down
// can take the token's place in nothing (it is proven, never sent), but a
// worker would give it results and a client its jobs. With
// Config.ProveServer they first have the server prove itself: a fresh
// challenge, answered with an HMAC keyed with what laboro's service and
// they alone hold (a worker's JobKey, answered by the Managers; a client's
// ClientKey, answered by the Service), once a connection.

// ErrServerUnproven is matched by the error of a Client's call, with
// Config.ProveServer, when the server answers its challenge with another
// key: another program, or a service of another token, is on its address.
var ErrServerUnproven = errors.New("jetstream: the NATS server does not prove that laboro's service is on it (is another program on its address?)")

// challengeLen is the length of a challenge.
const challengeLen = 32

// serverProof is the answer to a challenge that proves a holder of key on
// the server: an HMAC keyed with key, under a label of its own, so that no
// other proof or signature can be had from it.
func serverProof(key, challenge []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("laboro server proof\x00"))
	mac.Write(challenge)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// answerChallenge answers msg, a challenge, with the proof of key.
func answerChallenge(msg *nats.Msg, key []byte) error {
	if msg.Reply == "" || len(msg.Data) != challengeLen {
		return nil
	}
	return msg.Respond([]byte(serverProof(key, msg.Data)))
}

// serverCheck has the server of a connection prove that a holder of key
// answers on subject, and remembers the connection it proved.
type serverCheck struct {
	key     []byte
	subject string
	// mu has one challenge out at a time; provenOn is the connection's
	// reconnections plus one when the server last proved itself, 0 before.
	mu       sync.Mutex
	provenOn atomic.Uint64
}

// proven reports whether nc is connected, to a server that proved itself
// on this connection. (What is sent while nc is not connected goes to the
// server it connects to next, unproven.)
func (s *serverCheck) proven(nc *nats.Conn) bool {
	return nc.IsConnected() && s.provenOn.Load() == nc.Stats().Reconnects+1
}

// challenge sends the server a fresh challenge and records the connection
// as proven if the answer is the proof of s.key. s.mu is held. The error
// matches ErrServerUnproven when the answer proves another key.
func (s *serverCheck) challenge(ctx context.Context, nc *nats.Conn) error {
	epoch := nc.Stats().Reconnects + 1
	c := make([]byte, challengeLen)
	rand.Read(c)
	ctx, cancel := context.WithTimeout(ctx, firstAttempt)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, s.subject, c)
	if err != nil {
		return err
	}
	if !hmac.Equal(msg.Data, []byte(serverProof(s.key, c))) {
		return ErrServerUnproven
	}
	// Proven on the connection of before the request: one made since is
	// asked again.
	s.provenOn.Store(epoch)
	return nil
}
