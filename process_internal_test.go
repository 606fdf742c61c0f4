package laboro

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An output whose <pid>.output name is taken (an earlier process of the
// same pid whose output was not consumed yet) gets the next free name, and
// the earlier file is left alone; whether the output file was made unnamed
// (Linux) or under a temporary name, nothing else is left in the directory.
func TestOutputNameNeverOverwrites(t *testing.T) {
	opens := map[string]func(dir string) (*os.File, string, error){
		"openOutput": openOutput,
		"openOutput linked through /proc": func(dir string) (*os.File, string, error) {
			viaProc(t)
			return openOutput(dir)
		},
		"named": func(dir string) (*os.File, string, error) {
			f, err := os.CreateTemp(dir, ".laboro-*.output")
			if err != nil {
				return nil, "", err
			}
			return f, f.Name(), nil
		},
	}
	for how, open := range opens {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			r := &ProcessRunner{Dir: dir}
			for _, name := range []string{"4242.output", "4242_2.output"} {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("earlier "+name), 0o600))
			}
			out, tmp, err := open(dir)
			require.NoError(t, err)
			defer out.Close()
			_, err = out.WriteString("new")
			require.NoError(t, err)

			got, err := r.nameOutput(out, tmp, dir, 4242)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(dir, "4242_3.output"), got)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Len(t, entries, 3, "no temporary file left")
			for name, want := range map[string]string{
				"4242.output":   "earlier 4242.output",
				"4242_2.output": "earlier 4242_2.output",
				"4242_3.output": "new",
			} {
				b, err := os.ReadFile(filepath.Join(dir, name))
				require.NoError(t, err)
				assert.Equal(t, want, string(b), name)
			}
			fi, err := os.Stat(got)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the output is its user's alone")

			fresh, tmp, err := open(dir)
			require.NoError(t, err)
			defer fresh.Close()
			got, err = r.nameOutput(fresh, tmp, dir, 7)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(dir, "7.output"), got)
		})
	}
}

// BenchmarkOutputPlacement measures making an output file, naming it and
// removing it, as a process job does: unnamed and linked from its
// descriptor, unnamed and linked through /proc/self/fd, or made under a
// temporary name and renamed.
func BenchmarkOutputPlacement(b *testing.B) {
	for _, how := range []string{"descriptor", "proc", "rename"} {
		b.Run(how, func(b *testing.B) {
			if how == "proc" {
				viaProc(b)
			}
			dir := b.TempDir()
			name := filepath.Join(dir, "1.output")
			for b.Loop() {
				var f *os.File
				var tmp string
				var err error
				if how == "rename" {
					f, err = os.CreateTemp(dir, ".laboro-*.output")
					if err == nil {
						tmp = f.Name()
					}
				} else {
					f, tmp, err = openOutput(dir)
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := placeOutput(f, tmp, name); err != nil {
					b.Fatal(err)
				}
				f.Close()
				if err := os.Remove(name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A Handle gives back the job as submitted, every field of it, each set
// alone or all together (a field added to Job that storedJob forgets fails
// here); an empty Env (an empty environment) stays apart from a nil one
// (this process's); and a job that sets none of the fields kept apart takes
// no allocation of them.
func TestStoredJobKeepsEveryField(t *testing.T) {
	jt := reflect.TypeFor[Job]()
	all := reflect.New(jt).Elem()
	for i := range jt.NumField() {
		one := reflect.New(jt).Elem()
		for _, v := range []reflect.Value{one, all} {
			f := v.Field(i)
			switch f.Kind() {
			case reflect.String:
				f.SetString("x")
			case reflect.Slice:
				f.Set(reflect.ValueOf([]string{"a", "b"}))
			case reflect.Int64:
				f.SetInt(42)
			case reflect.Func:
				f.Set(reflect.ValueOf(func(context.Context) error { return nil }))
			case reflect.Interface:
				if f.Type() == reflect.TypeFor[io.Reader]() {
					f.Set(reflect.ValueOf(strings.NewReader("in")))
				} else {
					f.Set(reflect.ValueOf(7))
				}
			default:
				t.Fatalf("Job.%s: a kind this test does not know: %v", jt.Field(i).Name, f.Kind())
			}
		}
		requireSameJob(t, one.Interface().(Job), jt.Field(i).Name)
	}
	requireSameJob(t, all.Interface().(Job), "every field")

	empty := NewHandle(Job{ID: "e", Env: []string{}}).Job()
	require.NotNil(t, empty.Env, "an empty environment became this process's")
	assert.Nil(t, NewHandle(Job{ID: "n"}).Job().Env)
	assert.Nil(t, storeJob(Job{ID: "f", Func: func(context.Context) error { return nil }, Timeout: 1}).rest)
	assert.Nil(t, storeJob(Job{Command: "true", Args: []string{"x"}}).rest)
}

// requireSameJob checks that a Handle of want gives want back. (Funcs are
// compared by their pointers: reflect.DeepEqual says no to any two.)
func requireSameJob(t *testing.T, want Job, what string) {
	t.Helper()
	got := NewHandle(want).Job()
	require.Equal(t, want.Func == nil, got.Func == nil, what)
	if want.Func != nil {
		require.Equal(t, reflect.ValueOf(want.Func).Pointer(), reflect.ValueOf(got.Func).Pointer(), what)
	}
	want.Func, got.Func = nil, nil
	require.True(t, reflect.DeepEqual(want, got), "%s: got %+v, want %+v", what, got, want)
}

// A program's place in $PATH is looked up again once its time is up: a
// program installed meanwhile in an earlier directory of $PATH is run from
// then on.
func TestProgramPlaceExpires(t *testing.T) {
	early, late := t.TempDir(), t.TempDir()
	for _, dir := range []string{early, late} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "laboro-test-prog"), []byte("#!/bin/sh\n"), 0o755))
	}
	require.NoError(t, os.Remove(filepath.Join(early, "laboro-test-prog")))
	t.Setenv("PATH", early+string(os.PathListSeparator)+late)
	var c programCache
	assert.Equal(t, filepath.Join(late, "laboro-test-prog"), c.find("laboro-test-prog"))
	require.NoError(t, os.WriteFile(filepath.Join(early, "laboro-test-prog"), []byte("#!/bin/sh\n"), 0o755))
	assert.Equal(t, filepath.Join(late, "laboro-test-prog"), c.find("laboro-test-prog"), "looked up again within its time")
	c.mu.Lock()
	p := c.found["laboro-test-prog"]
	p.until = p.until.Add(-programTTL)
	c.found["laboro-test-prog"] = p
	c.mu.Unlock()
	assert.Equal(t, filepath.Join(early, "laboro-test-prog"), c.find("laboro-test-prog"))
	assert.Equal(t, "./x", c.find("./x"))
	assert.Equal(t, "laboro-no-such-program", c.find("laboro-no-such-program"))
}
