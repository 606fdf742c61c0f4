// Package secret is how the project's servers and clients find the secret
// they share, so that the safe path is the default: a server generates a
// token at its first start and keeps it in a file only its user can read,
// in that user's state directory, and the matching client on the same
// machine reads the same file with no setup.
//
//	tok, err := secret.Ensure("jobexec", "LABORO_TOKEN") // server side
//	tok, err := secret.Find("jobexec", "LABORO_TOKEN")   // client side
//	ok := secret.Equal(got, tok)
//
// A secret is never taken from the command line (where ps shows it); it
// comes from an environment variable, which Ensure and Find then remove
// from the process's environment so that no job started afterwards
// inherits it, or from a file. The variables of every secret the project
// knows (Known) leave the environment as the program starts, whether it
// reads them or not: a worker started from a shell that exports a
// client's token passes it to no job.
package secret

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// DirEnv names the environment variable that, when set, is the directory
// of the token files instead of the user's state directory.
const DirEnv = "LABORO_STATE_DIR"

// Known are the environment variables of the project's secrets.
var Known = []string{"LABORO_TOKEN", "WORKERSERVER_API_TOKEN", "WORKERSERVER_PASSWORD", "FUQ_AUTH"}

// held keeps the values of Known that the environment had when the
// program started, taken out of it then; read-only afterwards.
var held = map[string]string{}

func init() {
	var took []string
	for _, env := range Known {
		if v, ok := os.LookupEnv(env); ok {
			held[env] = v
			os.Unsetenv(env)
			if strings.TrimSpace(v) != "" {
				tookEnv.Store(true)
				took = append(took, env)
			}
		}
	}
	if len(took) > 0 {
		scrub(took...)
	}
}

// maxFile bounds a token file: a secret is short, and a file that is not
// one (a mistake of path) must not be read whole.
const maxFile = 64 << 10

// ErrNoSecret is returned by Find when neither the environment nor a token
// file holds the secret.
var ErrNoSecret = errors.New("secret: no secret found")

// ErrUnsafeFile is returned when a token file or its directory can be read
// or changed by other users.
var ErrUnsafeFile = errors.New("secret: file is open to other users")

// Dir is the directory of the token files: $LABORO_STATE_DIR, else
// $XDG_STATE_HOME/laboro, else ~/.local/state/laboro.
func Dir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "laboro"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("secret: no state directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "laboro"), nil
}

// Path is the token file of the named service, in Dir.
func Path(name string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, name+".token"), nil
}

// Ensure returns the secret of the named service for a server: from the
// environment variable env when it is set (and not empty), else from the
// service's token file, which it creates with a new random token (0600, in
// a 0700 directory) when there is none. It returns the file's path too
// ("" when the secret came from the environment), for the server to tell
// its operator where the token is.
func Ensure(name, env string) (tok, path string, err error) {
	if tok, ok := fromEnv(env); ok {
		return tok, "", nil
	}
	path, err = Path(name)
	if err != nil {
		return "", "", err
	}
	tok, err = ReadFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, path, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", "", fmt.Errorf("secret: %w", err)
	}
	tok = New()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) { // another server created it first
		tok, err = ReadFile(path)
		return tok, path, err
	}
	if err != nil {
		return "", "", fmt.Errorf("secret: %w", err)
	}
	_, err = f.WriteString(tok + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", "", fmt.Errorf("secret: %w", err)
	}
	return tok, path, nil
}

// Find returns the secret of the named service for a client: from the
// environment variable env when it is set, else from the service's token
// file. It returns ErrNoSecret when there is neither.
func Find(name, env string) (string, error) {
	tok, _, err := Locate(name, env)
	return tok, err
}

// Locate is Find, and also says where the secret came from, for messages:
// "$" and env's name, or the file's path.
func Locate(name, env string) (tok, from string, err error) {
	if tok, ok := fromEnv(env); ok {
		return tok, "$" + env, nil
	}
	path, err := Path(name)
	if err != nil {
		return "", "", err
	}
	tok, err = ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("%w: $%s is not set and there is no %s", ErrNoSecret, env, path)
	}
	return tok, path, err
}

// FromEnv returns the value of the environment variable env and removes
// it from the process's environment, so that no process started
// afterwards inherits it. ok is false when it is unset or empty.
func FromEnv(env string) (tok string, ok bool) { return fromEnv(env) }

func fromEnv(env string) (string, bool) {
	if env == "" {
		return "", false
	}
	v, ok := os.LookupEnv(env)
	if ok {
		os.Unsetenv(env)
		scrub(env)
	} else {
		v = held[env] // taken out as the program started
	}
	v = strings.TrimSpace(v)
	if v != "" {
		tookEnv.Store(true)
		if protecting.Load() {
			seal()
		}
	}
	return v, v != ""
}

var (
	// tookEnv is set once a secret was found in the environment (Known's,
	// at start, or another by Ensure, Find or FromEnv).
	tookEnv atomic.Bool
	// protecting is set by Protect.
	protecting atomic.Bool
)

// Protect keeps the secrets this program took from its environment from
// its jobs for good. Unsetting a variable changes the program's
// environment, not the copy the kernel keeps of the one it started with,
// which a process of the same user can read (/proc/<pid>/environ): a
// job could read its parent's. So the value of each secret taken from the
// environment is overwritten in that copy as it is taken (Linux; root's
// jobs may read any process's /proc files), and once a secret comes from
// the environment (now, or later through Ensure, Find or FromEnv), the
// process is made undumpable (Linux): its /proc files then belong to
// root, and no process of its user may trace it or read its memory (nor
// dump its core). Programs that start jobs call it as they start; a token
// file stays readable to the user's jobs, so jobs of others run under a
// user of their own.
func Protect() {
	protecting.Store(true)
	if tookEnv.Load() {
		seal()
	}
}

// ReadFile reads a secret from a file: its first line, without spaces
// around it. It refuses a file that other users can read or write, or
// that does not belong to this user (ErrUnsafeFile), and an empty one.
func ReadFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("secret: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("secret: %w", err)
	}
	if err := private(path, fi); err != nil {
		return "", err
	}
	b := make([]byte, maxFile)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return "", fmt.Errorf("secret: %s: %w", path, err)
	}
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	line = strings.TrimSpace(line)
	if line == "" {
		return "", fmt.Errorf("secret: %s is empty", path)
	}
	return line, nil
}

// Private returns an error matching ErrUnsafeFile when the file at path
// (fi, its information) is not a regular file of this user's that only
// this user may read and write: a file of secrets that is not a token
// file (workerserver's servers, with their passwords).
func Private(path string, fi fs.FileInfo) error { return private(path, fi) }

func private(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("secret: %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %v; chmod 600 it", ErrUnsafeFile, path, fi.Mode().Perm())
	}
	if !ownedByMe(fi) {
		return fmt.Errorf("%w: %s belongs to another user", ErrUnsafeFile, path)
	}
	return nil
}

// New returns a new random token: 32 bytes from crypto/rand, in hex.
func New() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// Equal reports whether a presented secret equals the expected one, in a
// time that depends on neither their contents nor their lengths. An empty
// expected secret equals nothing.
func Equal(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1 && want != ""
}

// MinLength is the fewest characters a secret may have that guards a
// server listening beyond the loopback. A token Ensure makes has 64.
const MinLength = 16

// ErrWeak is the error of Guard: a secret too short to be left to guard a
// server that other machines reach.
var ErrWeak = errors.New("secret too short for a server beyond this machine")

// Guard returns an error matching ErrWeak when host, the host a server
// listens on ("" and 0.0.0.0 mean every interface), reaches beyond the
// loopback and tok, the secret that guards it, has fewer than MinLength
// characters; from says where tok came from, for the message. On the
// loopback any secret will do.
func Guard(host, tok, from string) error {
	n := utf8.RuneCountInString(tok)
	if n >= MinLength || Loopback(host) {
		return nil
	}
	on, chars := host, "characters"
	if host == "" {
		on = "every interface"
	}
	if n == 1 {
		chars = "character"
	}
	return fmt.Errorf("%w: %s holds %d %s; a server listening on %s needs at least %d (make one with: head -c 32 /dev/urandom | base64)",
		ErrWeak, from, n, chars, on, MinLength)
}

// Loopback reports whether host, as a listening address's host, is the
// loopback only: "localhost" or a loopback IP address.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}
