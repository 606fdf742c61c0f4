package secret_test

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/laboro-go/laboro/internal/secret"
)

// A program that took a secret from its environment and called Protect is
// undumpable, so that a job of the same user cannot read the secret in its
// parent's /proc/<pid>/environ; without such a secret it stays as it was.
func TestProtectSealsAProcessHoldingASecretFromItsEnvironment(t *testing.T) {
	if step := os.Getenv("SECRET_TEST_PROTECT"); step != "" {
		// The child: Protect, then (step "later") a secret taken after
		// it; it prints whether it is dumpable.
		secret.Protect()
		if step == "later" {
			if _, ok := secret.FromEnv("SECRET_TEST_LATER"); !ok {
				os.Exit(3)
			}
		}
		d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
		if err != nil {
			os.Exit(4)
		}
		os.Stdout.WriteString(strconv.Itoa(d))
		os.Exit(0)
	}
	for _, tt := range []struct {
		name     string
		env      []string
		dumpable string
	}{
		{"a known secret at start", []string{"SECRET_TEST_PROTECT=start", "LABORO_TOKEN=lab-s3cret"}, "0"},
		{"a secret taken after Protect", []string{"SECRET_TEST_PROTECT=later", "SECRET_TEST_LATER=s3cret"}, "0"},
		{"no secret", []string{"SECRET_TEST_PROTECT=none"}, "1"},
		{"an empty variable", []string{"SECRET_TEST_PROTECT=empty", "FUQ_AUTH="}, "1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestProtectSealsAProcessHoldingASecretFromItsEnvironment$")
			cmd.Env = append(os.Environ(), tt.env...)
			out, err := cmd.Output()
			require.NoError(t, err, "%s", out)
			assert.Equal(t, tt.dumpable, string(out), "PR_GET_DUMPABLE")
		})
	}
}
