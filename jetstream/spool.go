package jetstream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
)

// spoolInMemory is how many bytes of encoded jobs a batch keeps in memory
// while it is checked; beyond it, they go to a temporary file.
const spoolInMemory = 8 << 20

// spool keeps a batch's encoded jobs until every one is checked: in
// memory, then in an unlinked temporary file once they pass spoolInMemory.
// Each record is the job's id and its message, each after its length
// (uvarint).
type spool struct {
	mem  bytes.Buffer
	f    *os.File
	w    *bufio.Writer
	rerr error // the error that ended records
}

// add keeps the record of one job.
func (s *spool) add(id string, data []byte) error {
	if s.f == nil && s.mem.Len()+len(id)+len(data) > spoolInMemory {
		if err := s.toFile(); err != nil {
			return err
		}
	}
	var w interface {
		io.Writer
		io.StringWriter
	} = &s.mem
	if s.w != nil {
		w = s.w
	}
	var n [binary.MaxVarintLen64]byte
	w.Write(binary.AppendUvarint(n[:0], uint64(len(id))))
	w.WriteString(id)
	w.Write(binary.AppendUvarint(n[:0], uint64(len(data))))
	_, err := w.Write(data)
	return err
}

// toFile moves the records to a temporary file, removed at once: nothing
// is left of it once the process ends, however it ends.
func (s *spool) toFile() error {
	f, err := os.CreateTemp("", "laboro-submit-*")
	if err != nil {
		return err
	}
	os.Remove(f.Name())
	s.f, s.w = f, bufio.NewWriterSize(f, 256<<10)
	_, err = s.mem.WriteTo(s.w)
	s.mem = bytes.Buffer{}
	return err
}

// records yields the records in the order they came. Its error, if any,
// is err's once it ends.
func (s *spool) records() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		var r *bufio.Reader
		if s.f == nil {
			r = bufio.NewReader(bytes.NewReader(s.mem.Bytes()))
		} else {
			if err := s.w.Flush(); err != nil {
				s.rerr = err
				return
			}
			if _, err := s.f.Seek(0, io.SeekStart); err != nil {
				s.rerr = err
				return
			}
			r = bufio.NewReaderSize(s.f, 256<<10)
		}
		for {
			id, err := readField(r)
			if errors.Is(err, io.EOF) {
				return
			}
			var data []byte
			if err == nil {
				data, err = readField(r)
			}
			if err != nil {
				s.rerr = err
				return
			}
			if !yield(string(id), data) {
				return
			}
		}
	}
}

// readField reads one length and as many bytes.
func readField(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > spoolMaxField {
		return nil, fmt.Errorf("a record of %d bytes in the spool", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	return b, nil
}

// spoolMaxField bounds a field read back: a job's message is bounded by
// the server's payload limit, far below.
const spoolMaxField = 1 << 30

// err returns what ended records early, if anything did.
func (s *spool) err() error { return s.rerr }

// Close removes the file, if any.
func (s *spool) Close() error {
	if s.f == nil {
		return nil
	}
	return s.f.Close()
}
