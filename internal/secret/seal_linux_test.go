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

// The value of a secret taken from the environment is gone from the copy
// of the environment the kernel keeps (/proc/<pid>/environ), which root's
// jobs may read despite the seal: its bytes are overwritten, its name
// stays, the other variables are untouched.
func TestSecretsLeaveTheKernelsCopyOfTheEnvironment(t *testing.T) {
	if os.Getenv("SECRET_TEST_SCRUB") != "" {
		if _, ok := secret.FromEnv("SECRET_TEST_LATER"); !ok {
			os.Exit(3)
		}
		b, err := os.ReadFile("/proc/self/environ")
		if err != nil {
			os.Exit(4)
		}
		os.Stdout.Write(b)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSecretsLeaveTheKernelsCopyOfTheEnvironment$")
	cmd.Env = append(os.Environ(), "SECRET_TEST_SCRUB=1", "LABORO_TOKEN=lab-s3cret-at-start",
		"SECRET_TEST_LATER=taken-later-s3cret", "SECRET_TEST_OTHER=kept-as-it-was")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	env := string(out)
	assert.NotContains(t, env, "lab-s3cret-at-start")
	assert.NotContains(t, env, "taken-later-s3cret")
	assert.Contains(t, env, "LABORO_TOKEN=\x00")
	assert.Contains(t, env, "\x00SECRET_TEST_OTHER=kept-as-it-was\x00")
}
