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

// Token is the nats.Option that presents token to an embedded server
// started WithToken: the server's token, or a RoleToken, whose inbox
// prefix (where its requests' answers come) it sets too.
func Token(token string) nats.Option {
	return func(o *nats.Options) error {
		o.Token = token
		if role, stream, _, ok := parseRole(token); ok {
			o.InboxPrefix = inboxPrefix(role, stream)
		}
		return nil
	}
}

// RoleInbox is the inbox prefix (nats.CustomInboxPrefix) of role on the
// streams of stream, where the answers to its requests come: Token sets it,
// and a connection that gets its token later (nats.TokenHandler) needs it.
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
			// Say it is there, and what it runs.
			c.workersSubject("*"),
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
			c.statusSubject(), c.cancelAPISubject(),
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

// tokenAuth admits the clients that present the token, with every right
// but deleting, and those that present a RoleToken derived from it, with
// their role's.
type tokenAuth string

func (t tokenAuth) Check(c server.ClientAuthentication) bool {
	opts := c.GetOpts()
	if opts == nil || t == "" {
		return false
	}
	if role, stream, mac, ok := parseRole(opts.Token); ok {
		if !sameToken(mac, roleMAC(string(t), role, stream)) {
			return false
		}
		c.RegisterUser(&server.User{Username: "laboro-" + string(role), Permissions: rolePermissions(role, stream)})
		return true
	}
	if !sameToken(opts.Token, string(t)) {
		return false
	}
	c.RegisterUser(&server.User{Username: "laboro", Permissions: ownerPermissions()})
	return true
}

// TokenRole returns the role of a RoleToken, and "" for any other token
// (a server's token).
func TokenRole(token string) Role {
	role, _, _, _ := parseRole(token)
	return role
}
