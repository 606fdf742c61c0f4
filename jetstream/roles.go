package jetstream

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Role is what a client of an embedded server started WithToken may do.
// The server's token itself gives every right but deleting (the service's,
// and its owner's); a RoleToken derived from it gives one role's rights on
// one set of streams, and nothing else.
type Role string

const (
	// RoleWorker takes jobs, runs them, and stores their results: it may
	// not submit or publish a job, read a result, or take a job back.
	RoleWorker Role = "worker"
	// RoleClient submits jobs, asks the service about them and cancels
	// them, and reads their results (a Client's rights): it may not take a
	// job, store a result, or reach the JOBS stream.
	RoleClient Role = "client"
)

// RoleToken returns the token that gives role's rights on the streams of
// stream (Config.Stream; "" means DefaultStream) on an embedded server
// whose token is token. It is derived from token (it cannot be turned back
// into it), so a machine that only runs workers holds a worker's token,
// not the server's. Connect with Token, which also sets the inbox prefix
// the role may use.
func RoleToken(token string, role Role, stream string) string {
	if stream == "" {
		stream = DefaultStream
	}
	return string(role) + "." + stream + "." + roleMAC(token, role, stream)
}

func roleMAC(token string, role Role, stream string) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("laboro role " + string(role) + " " + stream))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// parseRole splits a RoleToken; ok is false for any other token.
func parseRole(token string) (role Role, stream, mac string, ok bool) {
	r, rest, ok1 := strings.Cut(token, ".")
	stream, mac, ok2 := strings.Cut(rest, ".")
	role = Role(r)
	if !ok1 || !ok2 || (role != RoleWorker && role != RoleClient) || stream == "" {
		return "", "", "", false
	}
	return role, stream, mac, true
}

// Token is the nats.Option that proves token to an embedded server
// started WithToken: the server's token, or a RoleToken, whose inbox prefix
// (where its requests' answers come) it sets too. The token never crosses
// the wire: the client answers the nonce of the server's greeting with an
// HMAC of it keyed with the token, and says only which token it proves
// (the role and streams of a RoleToken). A program that holds the
// server's port while the server is down learns nothing it could use
// against the server, whose next nonce differs; and a server that offers
// no nonce (one that is not an embedded server started WithToken) is
// refused before anything is sent, with nats.ErrNkeysNotSupported. A NATS
// server of the user's own that wants a plain token takes it written in
// its URL (nats://token@host:port), in the clear.
func Token(token string) nats.Option {
	role, stream, key := tokenKey(token)
	return prove(role, stream, func() []byte { return key })
}

// RoleTokenFrom is Token with role's rights on the streams of stream (""
// means DefaultStream), for a token that may not be there yet or may
// change: token is called at each attempt to connect, and returns a
// RoleToken of that role and stream, or the server's token, from which
// one is derived. An empty token is refused by the server like a wrong
// one (nats.IgnoreAuthErrorAbort keeps a connection trying).
func RoleTokenFrom(role Role, stream string, token func() string) nats.Option {
	if stream == "" {
		stream = DefaultStream
	}
	return prove(role, stream, func() []byte {
		tok := token()
		if tok == "" {
			return nil
		}
		if TokenRole(tok) == "" {
			tok = RoleToken(tok, role, stream)
		}
		if r, s, key := tokenKey(tok); r == role && s == stream {
			return key
		}
		return nil
	})
}

// prove is the nats.Option that proves, at each connection, the key that
// key returns, for role on stream's streams (no role: the server's
// token). Without a key, the proof is empty, and refused.
func prove(role Role, stream string, key func() []byte) nats.Option {
	return func(o *nats.Options) error {
		if role != "" {
			o.InboxPrefix = inboxPrefix(role, stream)
		}
		o.Nkey = proofName(role, stream)
		o.SignatureCB = func(nonce []byte) ([]byte, error) {
			k := key()
			if k == nil {
				return nil, nil
			}
			return tokenProof(k, nonce), nil
		}
		return nil
	}
}

// tokenKey returns the role and stream of a RoleToken and the key of its
// proofs, its MAC; for the server's token, no role and the token itself.
func tokenKey(token string) (role Role, stream string, key []byte) {
	if role, stream, mac, ok := parseRole(token); ok {
		return role, stream, []byte(mac)
	}
	return "", "", []byte(token)
}

// ownerProof is the name a client proving the server's token gives in
// place of an nkey; one proving a RoleToken gives its role and stream.
const ownerProof = "laboro"

// proofName is what a client proving a token says it proves, in the nkey
// field of its CONNECT: the role and stream of a RoleToken, or ownerProof.
func proofName(role Role, stream string) string {
	if role == "" {
		return ownerProof
	}
	return string(role) + "." + stream
}

// tokenProof is a client's proof that it holds key: an HMAC of the nonce
// the server greeted it with.
func tokenProof(key, nonce []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("laboro nats proof\x00"))
	mac.Write(nonce)
	return mac.Sum(nil)
}

// JobKey returns the key of the jobs of the streams of stream (""
// means DefaultStream; see Config.JobKey), from the server's token or from
// a worker's RoleToken of those streams, which give the same key; nil for
// any other token (a client's has no part in running jobs).
func JobKey(token, stream string) []byte { return roleKey(token, RoleWorker, stream) }

// ClientKey returns the key with which a Service of the streams of stream
// ("" means DefaultStream) proves itself to Clients (see Config.ClientKey),
// from the server's token or from a client's RoleToken of those streams,
// which give the same key; nil for any other token.
func ClientKey(token, stream string) []byte { return roleKey(token, RoleClient, stream) }

// roleKey is the MAC of role's token on stream's streams, from the
// server's token or from that role token; nil for any other.
func roleKey(token string, role Role, stream string) []byte {
	if stream == "" {
		stream = DefaultStream
	}
	r, s, mac, ok := parseRole(token)
	switch {
	case token == "":
		return nil
	case !ok:
		mac = roleMAC(token, role, stream)
	case r != role || s != stream:
		return nil
	}
	return []byte(mac)
}

// jobMAC is the signature of a job's message (Config.JobKey): an HMAC of
// its subject, which names the job, and its body.
func jobMAC(key []byte, subject string, data []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("laboro job\x00" + subject + "\x00"))
	mac.Write(data)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// signedBy reports whether a job's message carries its HMAC keyed with key.
func signedBy(key []byte, subject string, h nats.Header, data []byte) bool {
	return hmac.Equal([]byte(h.Get(hdrSigned)), []byte(jobMAC(key, subject, data)))
}

// RoleInbox is the inbox prefix (nats.CustomInboxPrefix) of role on the
// streams of stream, where the answers to its requests come: Token and
// RoleTokenFrom set it; a client that presents a RoleToken otherwise (as
// a plain token) needs it.
func RoleInbox(role Role, stream string) string {
	if stream == "" {
		stream = DefaultStream
	}
	return inboxPrefix(role, stream)
}

// inboxPrefix is where the answers to a role's requests come: a role may
// listen there only, and so cannot overhear the answers to others.
func inboxPrefix(role Role, stream string) string {
	return "_INBOX." + string(role) + "." + stream
}

// rolePermissions are the least rights of role on stream's streams.
func rolePermissions(role Role, stream string) *server.Permissions {
	c := Config{Stream: stream}
	api := "$JS.API."
	var pub, sub []string
	switch role {
	case RoleWorker:
		jobs, results := c.jobsStream(), c.resultsStream()
		pub = []string{
			api + "INFO",
			api + "STREAM.INFO." + jobs, api + "STREAM.INFO." + results,
			// Make the streams and the consumer when they are missing;
			// not change them.
			api + "STREAM.CREATE." + jobs, api + "STREAM.CREATE." + results,
			api + "CONSUMER.CREATE." + jobs + "." + consumerName,
			api + "CONSUMER.DURABLE.CREATE." + jobs + "." + consumerName,
			api + "CONSUMER.INFO." + jobs + "." + consumerName,
			api + "CONSUMER.MSG.NEXT." + jobs + "." + consumerName,
			"$JS.ACK." + jobs + "." + consumerName + ".>",
			// Look up whether a job's Run ended, and store results.
			api + "DIRECT.GET." + results + "." + c.cancelSubject(">"),
			c.resultsSubject(">"),
			// Say it is there, and what it runs; why it did not run a job;
			// have the server prove it is laboro's.
			c.workersSubjects(), c.refusedSubject("*"), c.proveSubject(RoleWorker),
		}
		// Hear of ended jobs, of requests for the output of those it runs
		// (answered through Response), and of a new service's roll call.
		sub = []string{c.cancelSubject("*"), c.liveSubject("*"), c.rollSubject()}
	case RoleClient:
		submitted, results := c.submitStream(), c.resultsStream()
		pub = []string{
			api + "INFO",
			api + "STREAM.INFO." + submitted, api + "STREAM.INFO." + results,
			api + "STREAM.CREATE." + submitted,
			c.submitSubject(">"),
			c.statusSubject(), c.cancelAPISubject(), c.proveSubject(RoleClient),
			// Read results: look them up, and read them in order.
			api + "DIRECT.GET." + results + ".>", api + "STREAM.MSG.GET." + results,
			api + "CONSUMER.CREATE." + results + ".>", api + "CONSUMER.INFO." + results + ".>",
			api + "CONSUMER.MSG.NEXT." + results + ".>", api + "CONSUMER.DELETE." + results + ".>",
		}
	}
	sub = append(sub, inboxPrefix(role, stream)+".>")
	perms := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
	if role == RoleWorker {
		// One answer to each request for live output it received, soon.
		perms.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: 10 * time.Second}
	}
	return perms
}

// ownerPermissions are the rights of the server's token: all but deleting
// a stream or the workers' consumer (Denied).
func ownerPermissions() *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{">"}, Deny: Denied},
		Subscribe: &server.SubjectPermission{Allow: []string{">"}},
	}
}

// Denied are the subjects that no client of an embedded server with a
// token may publish to: the JetStream API's requests that delete a stream
// or the workers' consumer, which would lose every job in them without a
// word to the service.
var Denied = []string{"$JS.API.STREAM.DELETE.>", "$JS.API.CONSUMER.DELETE.*." + consumerName}

// tokenAuth admits the clients that prove the token (Token), or present
// it, with every right but deleting, and those that prove or present a
// RoleToken derived from it, with their role's.
type tokenAuth string

func (t tokenAuth) Check(c server.ClientAuthentication) bool {
	opts := c.GetOpts()
	if opts == nil || t == "" {
		return false
	}
	if opts.Nkey != "" {
		return t.checkProof(c, opts)
	}
	if role, stream, mac, ok := parseRole(opts.Token); ok {
		if !sameToken(mac, roleMAC(string(t), role, stream)) {
			return false
		}
		return t.admit(c, role, stream)
	}
	if !sameToken(opts.Token, string(t)) {
		return false
	}
	return t.admit(c, "", "")
}

// checkProof admits a client whose proof (Sig) is the HMAC, keyed with
// the token it names (Nkey), of the nonce it was greeted with, in
// unpadded URL-safe base64.
func (t tokenAuth) checkProof(c server.ClientAuthentication, opts *server.ClientOpts) bool {
	var role Role
	var stream string
	key := []byte(t)
	if opts.Nkey != ownerProof {
		r, s, ok := strings.Cut(opts.Nkey, ".")
		role, stream = Role(r), s
		if !ok || (role != RoleWorker && role != RoleClient) || stream == "" || strings.Contains(stream, ".") {
			return false
		}
		key = []byte(roleMAC(string(t), role, stream))
	}
	nonce := c.GetNonce()
	// The proof's text is compared, not what it decodes to: a decoder
	// skips line breaks, and only the one spelling of the proof is it.
	want := base64.RawURLEncoding.EncodeToString(tokenProof(key, nonce))
	if len(nonce) == 0 || !hmac.Equal([]byte(opts.Sig), []byte(want)) {
		return false
	}
	return t.admit(c, role, stream)
}

// admit gives a client the rights of role on stream's streams, or the
// token's when role is "".
func (t tokenAuth) admit(c server.ClientAuthentication, role Role, stream string) bool {
	if role == "" {
		c.RegisterUser(&server.User{Username: "laboro", Permissions: ownerPermissions()})
		return true
	}
	c.RegisterUser(&server.User{Username: "laboro-" + string(role), Permissions: rolePermissions(role, stream)})
	return true
}

// TokenRole returns the role of a RoleToken, and "" for any other token
// (a server's token).
func TokenRole(token string) Role {
	role, _, _, _ := parseRole(token)
	return role
}
