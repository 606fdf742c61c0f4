package command

import (
	"fmt"
	"os"

	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/jetstream"
)

// token prints the token of a role (worker or client), derived from the
// server's token, for a machine that is to have that role's rights only:
// its commands take it from $LABORO_TOKEN or its laboro.token.
func token(args []string) int {
	c := newCommon("token", "[flags] (worker | client)",
		"Prints the token of a role, worker or client, derived from the server's token ($LABORO_TOKEN, or "+
			"laboro.token where `laboro serve` ran), for a machine that is to have that role's rights only: its "+
			"commands take it from $LABORO_TOKEN or its laboro.token.\n\n"+
			"Exit status: 0; 1 when the server's token cannot be found, or is a role's; 2 for a usage error.")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if c.fs.NArg() != 1 {
		return c.usageError("name one role: worker or client")
	}
	role := jetstream.Role(c.fs.Arg(0))
	if role != jetstream.RoleWorker && role != jetstream.RoleClient {
		return c.usageError("role %q: must be worker or client", role)
	}
	tok, err := secret.Find("laboro", "LABORO_TOKEN")
	if err != nil {
		fmt.Fprintf(os.Stderr, "laboro token: the server's token: %v (run it where `laboro serve` ran, or set LABORO_TOKEN)\n", err)
		return exitFailed
	}
	if r := jetstream.TokenRole(tok); r != "" {
		fmt.Fprintf(os.Stderr, "laboro token: the token found is a %s's, not the server's: no other can be made from it\n", r)
		return exitFailed
	}
	fmt.Println(jetstream.RoleToken(tok, role, c.stream))
	return 0
}
