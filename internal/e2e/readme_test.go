package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/laboro-go/laboro/internal/freeport"
)

func TestMain(m *testing.M) { e2e.Main(m) }

// The README's shell blocks are what a new user copies first: each one
// runs here as shipped, line by line, on one machine. The few rewrites that
// make "many machines" one are listed in rewrite; a line that is not run is
// listed in notRun with the reason.
//
// A line's exit status must be 0 unless exitStatus says otherwise; a
// command started in the background must still be running (or have ended
// with status 0) when its block ends; a server started in the background is
// waited for (its "serving" log line) before the next line runs, as a user
// would wait for it.
func TestReadmeBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs every binary")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	blocks := shellBlocks(string(readme))
	require.GreaterOrEqual(t, len(blocks), 10, "the README's sh blocks")

	bin := t.TempDir()
	for _, pkg := range []string{"jobExecutorServer", "jobCommander", "runexp-manager", "runexp-runner",
		"fuq-foreman", "fuq-worker", "pulse-controller", "pulse-worker", "workerserver-master", "workerserver-worker"} {
		link(t, e2e.Build(t, "github.com/laboro-go/laboro/cmd/"+pkg), filepath.Join(bin, pkg))
	}
	link(t, e2e.Build(t, "github.com/laboro-go/laboro/jetstream/cmd/laboro"), filepath.Join(bin, "laboro"))

	skipped := map[string]bool{}
	ran := 0
	for _, b := range blocks {
		t.Run(fmt.Sprintf("line%d", b.line), func(t *testing.T) {
			ran++
			runBlock(t, root, bin, b, skipped)
		})
	}
	if ran < len(blocks) { // -run chose some
		return
	}
	for line := range notRun {
		assert.True(t, skipped[line], "notRun lists %q, which the README no longer has", line)
	}
}

// notRun are the README lines this test does not run.
var notRun = map[string]string{
	"go test -race ./...": "it is the suite this test is part of",
	"go install github.com/laboro-go/laboro/cmd/...@latest":              "it fetches the published module",
	"go install github.com/laboro-go/laboro/jetstream/cmd/laboro@latest": "it fetches the published module",
}

// exitStatus gives the lines whose documented exit status is not 0: a line
// contains the key.
var exitStatus = map[string]int{
	"laboro run -f examples/jobs.txt":    1, // one of the example jobs fails on purpose
	"laboro status -watch":               1, // as it does: the batch has a failed job
	"jobCommander localhost 7856 stop":   1, // job_3 is not queued: NOTFOUND
	"fuq-foreman cancel job_1":           0,
	"laboro submit -f examples/jobs.txt": 0,
}

// servers are the programs a line starts in the background and the next
// lines need: the test waits for their log line saying they serve.
var servers = regexp.MustCompile(`^bin/(jobExecutorServer|runexp-manager|fuq-foreman|pulse-controller|workerserver-master|laboro serve)\b`)

type block struct {
	line  int // of the README where the block starts
	lines []string
}

// shellBlocks returns the README's ```sh blocks.
func shellBlocks(readme string) []block {
	var blocks []block
	var cur *block
	for i, line := range strings.Split(readme, "\n") {
		switch {
		case cur == nil && line == "```sh":
			cur = &block{line: i + 1}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	return blocks
}

var (
	comment      = regexp.MustCompile(`\s+#\s.*$`)
	laboroClient = regexp.MustCompile(`\bbin/laboro (submit|status|output|cancel)\b`)
)

// rewrite makes a line meant for several machines run on this one: the
// other machines' names become the loopback, the well-known ports free
// ones (given to the clients that would find the default), and a fixed
// directory one of the test's.
func rewrite(line string, ports map[string]string) string {
	line = regexp.MustCompile(`\b(managerhost|foremanhost|server-host)\b`).ReplaceAllString(line, "127.0.0.1")
	line = strings.ReplaceAll(line, "/tmp/ctl", "ctl")
	if strings.HasPrefix(line, "bin/laboro serve") && !strings.Contains(line, "-listen") {
		line = strings.Replace(line, "bin/laboro serve", "bin/laboro serve -listen 127.0.0.1:4222", 1)
	}
	// ($LABORO_NATS would do for the clients, but it makes serve use that
	// server instead of its own.)
	line = laboroClient.ReplaceAllString(line, "bin/laboro $1 -nats nats://127.0.0.1:4222")
	return regexp.MustCompile(`\b(7856|7227|7720|5429|8080|8081|4222)\b`).ReplaceAllStringFunc(line, func(p string) string {
		return ports[p]
	})
}

// prelude defines what stands in for the rest of the world: go (the
// binaries are built already; go run of a command runs the built one), and
// scp (the other machine is this one: a path after "host:" is taken from
// $HOME, as scp does).
const prelude = `
go() {
	case "$1 $2" in
	"build -o") return 0 ;;
	"run ./jetstream/cmd/laboro") shift 2; bin/laboro "$@" ;;
	"run "*) command go -C "$REPO" "$@" ;;
	*) echo "README test: go $*: not expected" >&2; return 99 ;;
	esac
}
scp() {
	local dst=${2#*:}
	case "$dst" in "") dst=. ;; /*) ;; *) dst=$HOME/$dst ;; esac
	mkdir -p "$(dirname "$dst")" && cp "$1" "$dst"
}
status() { echo "$1 $2" >> "$STATUS"; }
ready() { # the log of background line $1 says it serves, or it ended
	until grep -qE 'serving|listening' "bg$1.log" 2>/dev/null || [ -e "bg$1.exit" ]; do
		sleep 0.05
	done
}
`

func runBlock(t *testing.T, root, bin string, b block, skipped map[string]bool) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	require.NoError(t, os.Mkdir(home, 0o700))
	link(t, bin, filepath.Join(dir, "bin"))
	link(t, filepath.Join(root, "examples"), filepath.Join(dir, "examples"))
	given(t, dir, home)

	ports := map[string]string{}
	for _, p := range []string{"7856", "7227", "7720", "5429", "8080", "8081", "4222"} {
		ports[p] = strconv.Itoa(freeport.Port(t))
	}

	var script strings.Builder
	script.WriteString(prelude)
	ran := map[int]string{}
	bg := map[int]string{}
	cont := ""
	for i, raw := range b.lines {
		line := strings.TrimSpace(comment.ReplaceAllString(raw, ""))
		if line == "" {
			continue
		}
		// A command goes on over the next line after a pipe.
		line, cont = cont+line, ""
		if strings.HasSuffix(line, "|") {
			cont = line + " "
			continue
		}
		if _, ok := notRun[line]; ok {
			skipped[line] = true
			continue
		}
		line = rewrite(line, ports)
		if rest, ok := strings.CutSuffix(line, "&"); ok {
			bg[i] = raw
			// The status is written whole, then named: a reader never
			// finds the file empty.
			fmt.Fprintf(&script, "( %s 2>bg%d.log; echo $? > bg%d.status; mv bg%d.status bg%d.exit ) &\n",
				strings.TrimSpace(rest), i, i, i, i)
			if servers.MatchString(line) {
				fmt.Fprintf(&script, "ready %d\n", i)
			}
			continue
		}
		ran[i] = raw
		fmt.Fprintf(&script, "%s\nstatus %d $?\n", line, i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "block.sh"), []byte(script.String()), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "block.sh")
	cmd.Dir = dir
	cmd.Env = blockEnv(root, home, dir, ports)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The output goes to a file, not a pipe: the commands left in the
	// background hold it open after the script ends.
	outFile, err := os.Create(filepath.Join(dir, "output"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = outFile, outFile
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err = cmd.Wait()
	outFile.Close()
	out, _ := os.ReadFile(outFile.Name())
	if len(out) > 4000 { // what a failure message needs: the end
		out = append([]byte("…"), out[len(out)-4000:]...)
	}

	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	require.NoError(t, err, "the block's script: %s", out)

	statuses := map[int]int{}
	st, _ := os.ReadFile(filepath.Join(dir, "status"))
	for _, l := range strings.Split(strings.TrimSpace(string(st)), "\n") {
		var i, code int
		if _, err := fmt.Sscan(l, &i, &code); err == nil {
			statuses[i] = code
		}
	}
	for i, raw := range ran {
		want := 0
		for key, code := range exitStatus {
			if strings.Contains(raw, key) {
				want = code
			}
		}
		code, ok := statuses[i]
		if assert.True(t, ok, "README line %d did not end: %s\n%s", b.line+1+i, raw, out) {
			assert.Equal(t, want, code, "README line %d: %s\n%s", b.line+1+i, raw, out)
		}
	}
	// What the block left in the background is still running, or ended
	// well: a server or worker that failed made the lines after it mean
	// nothing.
	for i, raw := range bg {
		if exit, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("bg%d.exit", i))); err == nil {
			log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("bg%d.log", i)))
			assert.Equal(t, "0", strings.TrimSpace(string(exit)), "README line %d, in the background: %s\n%s", b.line+1+i, raw, log)
		}
	}
	if t.Failed() {
		t.Logf("block at README line %d:\n%s\noutput:\n%s", b.line, script.String(), out)
		for i := range bg {
			log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("bg%d.log", i)))
			t.Logf("standard error of line %d, in the background:\n%s", b.line+1+i, log)
		}
	}
}

// blockEnv is a new user's environment: a home and a runtime directory of
// its own, no state directory or secret set; the clients' default
// addresses are the servers' ports of the test.
func blockEnv(root, home, dir string, ports map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "LABORO_STATE_DIR", "XDG_STATE_HOME", "XDG_CACHE_HOME", "LABORO_TOKEN", "FUQ_AUTH",
			"WORKERSERVER_API_TOKEN", "WORKERSERVER_PASSWORD", "WORKERSERVER_URL", "LABORO_NATS", "XDG_RUNTIME_DIR":
			continue
		}
		env = append(env, kv)
	}
	// The Go caches stay where they are, as they would for a user whose
	// home they are in.
	for _, v := range []string{"GOMODCACHE", "GOCACHE", "GOPATH"} {
		out, err := exec.Command("go", "env", v).Output()
		if err == nil {
			env = append(env, v+"="+strings.TrimSpace(string(out)))
		}
	}
	return append(env, "HOME="+home, "XDG_RUNTIME_DIR="+dir, "REPO="+root, "STATUS="+filepath.Join(dir, "status"),
		"WORKERSERVER_URL=http://127.0.0.1:"+ports["8080"])
}

// given makes what the README says the user has: the TLS files of the fuq
// foreman (its certificate and key, and the CA a worker trusts), and the
// reference's ~/.fuq/fuqsrv.conf that holds the shared secret.
func given(t *testing.T, dir, home string) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "readme CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "foreman"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	write := func(name, typ string, der []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	}
	write("root.crt", "CERTIFICATE", caDER)
	write("fuq.crt", "CERTIFICATE", leafDER)
	write("fuq.key", "EC PRIVATE KEY", keyDER)
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".fuq"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".fuq", "fuqsrv.conf"),
		[]byte("auth readme-secret-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"\n"), 0o600))
}

func link(t *testing.T, target, name string) {
	require.NoError(t, os.Symlink(target, name))
}
