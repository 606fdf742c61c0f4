package laboro_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kballard/go-shellquote"
	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJobString(t *testing.T) {
	tests := []struct {
		job  laboro.Job
		want string
	}{
		{laboro.Job{Command: `grep "two words" file`}, `grep "two words" file`},
		{laboro.Job{Args: []string{"grep", "two words", "file"}}, `grep 'two words' file`},
		{laboro.Job{Args: []string{"echo", "it's", "", "a=b,c:d/e.f"}}, `echo 'it'\''s' '' a=b,c:d/e.f`},
		{laboro.Job{Script: "echo hi"}, "script"},
		{laboro.Job{Func: func(context.Context) error { return nil }}, "func"},
		// A protocol's job says what it runs through its Payload's String.
		{laboro.Job{Payload: net.IPv4(10, 0, 0, 1)}, "10.0.0.1"},
		{laboro.Job{Payload: struct{ n int }{1}}, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.job.String())
		b, err := tt.job.AppendText([]byte("<job_1, "))
		require.NoError(t, err)
		assert.Equal(t, "<job_1, "+tt.want, string(b), "AppendText appends the same text")
	}
	buf := make([]byte, 0, 64)
	job := laboro.Job{Args: []string{"grep", "two words", "file"}}
	assert.Zero(t, testing.AllocsPerRun(100, func() { buf, _ = job.AppendText(buf[:0]) }), "AppendText into room allocates nothing")
}

func TestStatusString(t *testing.T) {
	assert.Equal(t, "succeeded", laboro.StatusSucceeded.String())
	assert.Equal(t, "timed out", laboro.StatusTimedOut.String())
	assert.Equal(t, "status(0)", laboro.Status(0).String())
}

// FuzzArgsString checks that the text Job.String shows for an argv is a
// command line that splits back into the same argv, so that a job listed by
// poll can be submitted again as it reads.
func FuzzArgsString(f *testing.F) {
	for _, seed := range [][]string{
		{"ls", "-l"},
		{"sh", "-c", "echo a   b"},
		{"printf", "%s|", "it's", "", `back\slash`, `"quoted"`, "$HOME", "tab\there"},
		{"x", "new\nline", "ünïcödé", "*?[glob]", "a;b&c|d"},
	} {
		f.Add(strings.Join(seed, "\x00"))
	}
	f.Fuzz(func(t *testing.T, joined string) {
		if !utf8.ValidString(joined) {
			t.Skip("command lines are text")
		}
		args := strings.Split(joined, "\x00")
		if args[0] == "" {
			t.Skip("no program")
		}
		line := laboro.Job{Args: args}.String()
		got, err := shellquote.Split(line)
		require.NoError(t, err, "%q", line)
		require.Equal(t, args, got, "%q", line)
	})
}
