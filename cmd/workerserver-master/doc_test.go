package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The package documentation shows each command as the binary takes it:
// every line of the command list that `help` prints is in it, so that a
// line copied from `go doc` runs (serve is named first, or left out; the
// flags come after it).
func TestDocShowsTheCommandsAsTheyRun(t *testing.T) {
	masterBin, _ := build(t)
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	var doc []string
	for _, l := range strings.Split(f.Doc.Text(), "\n") {
		if strings.HasPrefix(l, "\tworkerserver-master") {
			doc = append(doc, strings.TrimSpace(l))
		}
	}
	out, err := exec.Command(masterBin, "help").Output()
	require.NoError(t, err)
	var help []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "  workerserver-master ") {
			help = append(help, strings.TrimSpace(l))
		}
	}
	require.Len(t, help, 4, "%s", out)
	assert.Equal(t, help, doc)

	// serve named, its flags after it: the master serves.
	m := e2e.Start(t, nil, masterBin, "serve", "-listen", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "jobs.db"))
	m.Await(t, e2e.ServingAddr, 20*time.Second)
}
