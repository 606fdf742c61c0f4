//go:build !linux

package laboro

import "os"

// openOutput opens a new output file in dir for writing, under a temporary
// name.
func openOutput(dir string) (f *os.File, tmp string, err error) {
	f, err = os.CreateTemp(dir, ".laboro-*.output")
	if err != nil {
		return nil, "", err
	}
	return f, f.Name(), nil
}

// placeOutput renames the output file from tmp to path; an error matching
// fs.ErrExist if path is taken.
func placeOutput(_ *os.File, tmp, path string) error { return renameNew(tmp, path) }
