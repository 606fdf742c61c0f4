package laboro

import (
	"os"
	"path/filepath"
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

// viaProc has output files linked through /proc/self/fd until tb ends.
func viaProc(tb testing.TB) {
	was := noEmptyPath.Swap(true)
	tb.Cleanup(func() { noEmptyPath.Store(was) })
}
