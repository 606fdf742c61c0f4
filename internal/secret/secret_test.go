package secret_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/laboro-go/laboro/internal/secret"
)

func TestEnsureCreatesAPrivateTokenThatFindReads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	t.Setenv(secret.DirEnv, dir)
	tok, path, err := secret.Ensure("svc", "")
	require.NoError(t, err)
	assert.Len(t, tok, 64)
	assert.Equal(t, filepath.Join(dir, "svc.token"), path)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())

	again, _, err := secret.Ensure("svc", "")
	require.NoError(t, err)
	assert.Equal(t, tok, again, "a second start keeps the token")
	found, err := secret.Find("svc", "")
	require.NoError(t, err)
	assert.Equal(t, tok, found)
}

func TestEnvironmentWinsAndIsRemovedFromChildren(t *testing.T) {
	t.Setenv(secret.DirEnv, t.TempDir())
	t.Setenv("SECRET_TEST_TOKEN", " s3cret \n")
	tok, path, err := secret.Ensure("svc", "SECRET_TEST_TOKEN")
	require.NoError(t, err)
	assert.Equal(t, "s3cret", tok)
	assert.Empty(t, path)
	out, err := exec.Command("env").Output()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "s3cret", "a process started afterwards must not inherit the secret")
}

func TestFindWithoutSecretNamesWhatIsMissing(t *testing.T) {
	t.Setenv(secret.DirEnv, t.TempDir())
	_, err := secret.Find("svc", "SECRET_TEST_UNSET")
	require.ErrorIs(t, err, secret.ErrNoSecret)
	assert.Contains(t, err.Error(), "$SECRET_TEST_UNSET")
	assert.Contains(t, err.Error(), "svc.token")
}

func TestReadFileRefusesFilesOthersCanRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	require.NoError(t, os.WriteFile(p, []byte("abc\nrest"), 0o644))
	require.NoError(t, os.Chmod(p, 0o644))
	_, err := secret.ReadFile(p)
	require.ErrorIs(t, err, secret.ErrUnsafeFile)
	require.NoError(t, os.Chmod(p, 0o600))
	tok, err := secret.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "abc", tok)

	require.NoError(t, os.WriteFile(p, []byte("  \n"), 0o600))
	_, err = secret.ReadFile(p)
	require.Error(t, err)
}

func TestEqual(t *testing.T) {
	assert.True(t, secret.Equal("abc", "abc"))
	assert.False(t, secret.Equal("ab", "abc"))
	assert.False(t, secret.Equal("abcd", "abc"))
	assert.False(t, secret.Equal("", ""), "an empty secret admits no one")
	assert.NotEqual(t, secret.New(), secret.New())
	assert.False(t, strings.ContainsAny(secret.New(), " \n"))
}

// The project's secrets leave the environment as a program starts, read
// or not: a job it starts inherits none; FromEnv still finds them.
func TestKnownSecretsLeaveTheEnvironmentAtStart(t *testing.T) {
	if os.Getenv("SECRET_TEST_CHILD") == "1" {
		// The child: what a job started now would inherit, then what
		// FromEnv finds.
		out, err := exec.Command("env").Output()
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.Write(out)
		tok, ok := secret.FromEnv("WORKERSERVER_API_TOKEN")
		os.Stdout.WriteString("FromEnv=" + tok + " " + map[bool]string{true: "ok"}[ok] + "\n")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKnownSecretsLeaveTheEnvironmentAtStart$")
	cmd.Env = append(os.Environ(), "SECRET_TEST_CHILD=1", "WORKERSERVER_API_TOKEN=api-s3cret", "LABORO_TOKEN=lab-s3cret", "FUQ_AUTH=fuq-s3cret")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	for _, leaked := range []string{"api-s3cret", "lab-s3cret", "fuq-s3cret"} {
		assert.NotContains(t, strings.Split(string(out), "FromEnv=")[0], leaked, "a job would inherit it")
	}
	assert.Contains(t, string(out), "SECRET_TEST_CHILD=1", "the rest of the environment stays")
	assert.Contains(t, string(out), "FromEnv=api-s3cret ok\n")
}

// A short secret may guard a server on the loopback only; the refusal says
// where the secret came from and how long it must be.
func TestGuard(t *testing.T) {
	long := strings.Repeat("k", secret.MinLength)
	for _, host := range []string{"127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"} {
		assert.NoError(t, secret.Guard(host, "x", "$FUQ_AUTH"), host)
	}
	for _, host := range []string{"", "0.0.0.0", "::", "10.1.2.3", "example.org"} {
		err := secret.Guard(host, long[1:], "$FUQ_AUTH")
		require.ErrorIs(t, err, secret.ErrWeak, host)
		on := host
		if host == "" {
			on = "every interface"
		}
		assert.ErrorContains(t, err, fmt.Sprintf("$FUQ_AUTH holds %d characters; a server listening on %s needs at least %d", secret.MinLength-1, on, secret.MinLength))
		assert.NoError(t, secret.Guard(host, long, "$FUQ_AUTH"), host)
	}
	assert.NoError(t, secret.Guard("0.0.0.0", secret.New(), "made"), "a token New makes")
	assert.ErrorContains(t, secret.Guard("0.0.0.0", "x", "$FUQ_AUTH"), "$FUQ_AUTH holds 1 character;")
	// Characters, as the message says, not bytes: 15 two-byte letters
	// are 30 bytes and still too few.
	accented := strings.Repeat("é", secret.MinLength-1)
	assert.ErrorContains(t, secret.Guard("0.0.0.0", accented, "$FUQ_AUTH"),
		fmt.Sprintf("$FUQ_AUTH holds %d characters;", secret.MinLength-1))
	assert.NoError(t, secret.Guard("0.0.0.0", accented+"é", "$FUQ_AUTH"))
}
