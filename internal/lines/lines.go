// Package lines mends files of lines that a crash may have cut: append-only
// logs and journals, whose last line may lack its newline after a power
// loss or a full disk.
package lines

import (
	"bytes"
	"os"
)

// Whole returns how many bytes of f its whole lines take: all but a last
// line without its newline, which a crash cut as it was appended. It
// reads from the end, and leaves f's offset as it was.
func Whole(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := fi.Size()
	buf := make([]byte, min(end, 64<<10))
	for end > 0 {
		n := min(end, int64(len(buf)))
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return 0, nil
}

// DropCut truncates f to its whole lines (Whole), so that the next line
// appended starts a line of its own rather than end the cut one. f must be
// open for reading and writing.
func DropCut(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	whole, err := Whole(f)
	if err != nil || whole == fi.Size() {
		return err
	}
	return f.Truncate(whole)
}
