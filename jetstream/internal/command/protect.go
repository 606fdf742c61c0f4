package command

import "github.com/laboro-go/laboro/internal/secret"

// laboro keeps the project's secrets from the jobs it starts, as every
// command of the project does (see internal/cli): out of the environment
// as the program starts, and its first environment out of the jobs' reach.
func init() { secret.Protect() }
