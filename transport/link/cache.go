package link

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

const (
	cacheExt   = ".json"
	tempPrefix = ".tmp-"
	tempSuffix = ".part"
	// maxName keeps a file name (with its extension) well under the 255
	// bytes most file systems allow, whatever the key's length.
	maxName = 200
)

// fileName is the cache file of a key: the key with every byte outside
// [A-Za-z0-9._-] written %XX, then ".json". The escaping is injective, so
// two keys never share a file, and no key can name a path outside the
// directory ("/" becomes %2F, and the ".json" suffix means ".." is never
// the whole name). A job id of the usual kind keeps its own name, as the
// reference's <jobId>.json does. A name that would be too long is cut and
// ends with "~" and the key's SHA-256 instead ("~" never comes out of the
// escaping, so it cannot meet a short key's name).
func fileName(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	name := b.String()
	if len(name)+len(cacheExt) > maxName {
		sum := sha256.Sum256([]byte(key))
		h := hex.EncodeToString(sum[:])
		name = name[:maxName-len(cacheExt)-len(h)-1] + "~" + h
	}
	return name + cacheExt
}

// record is a cache file's content. The body is written as JSON itself
// when it is compact JSON (what a protocol's status usually is), so that a
// person can read the cache; otherwise, as base64 in "bytes". Either way
// it reads back byte for byte. Seq orders the files (oldest first) across
// runs; Time is only for people.
type record struct {
	Key   string          `json:"key"`
	Final bool            `json:"final"`
	Seq   uint64          `json:"seq"`
	Time  time.Time       `json:"time"`
	Body  json.RawMessage `json:"body,omitempty"`
	Bytes []byte          `json:"bytes,omitempty"`
}

func encodeRecord(r record, body []byte) ([]byte, error) {
	if compactJSON(body) {
		r.Body = body
	} else if len(body) > 0 {
		r.Bytes = body
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// The default HTML escaping would rewrite <, > and & inside the body.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// compactJSON reports whether b is JSON that the encoder writes back
// unchanged: valid, and without spaces it would remove.
func compactJSON(b []byte) bool {
	if len(b) == 0 || !json.Valid(b) {
		return false
	}
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return false
	}
	return bytes.Equal(buf.Bytes(), b)
}

func decodeRecord(data []byte) (record, []byte, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return r, nil, err
	}
	if len(r.Body) > 0 && len(r.Bytes) > 0 {
		return r, nil, errors.New("both body and bytes")
	}
	if len(r.Body) > 0 {
		return r, []byte(r.Body), nil
	}
	return r, r.Bytes, nil
}

// cache is the file cache: one file per key in dir, and an index of them
// in memory. Its methods are safe for concurrent use; one mutex orders
// every change, so that "a later message replaces an earlier one" holds
// on disk too.
type cache struct {
	dir string
	max int64 // the largest file it reads
	now func() time.Time
	log *zap.Logger

	mu      sync.Mutex
	seq     uint64                // the last Seq given
	entries map[string]cacheEntry // by key
}

type cacheEntry struct {
	seq   uint64
	final bool
}

// openCache creates dir (0700) if needed and reads what it holds: the
// files of an earlier run, which may have crashed. Files it cannot read
// are logged and left alone; half-written temporary files of a crash are
// removed.
func openCache(dir string, maxFile int64, now func() time.Time, log *zap.Logger) (*cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("transport: cache: %w", err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("transport: cache: %w", err)
	}
	c := &cache{dir: dir, max: maxFile, now: now, log: log, entries: make(map[string]cacheEntry)}
	for _, de := range des {
		name := de.Name()
		switch {
		case strings.HasPrefix(name, tempPrefix) && strings.HasSuffix(name, tempSuffix):
			// Never renamed into place: its message is in the previous
			// file of its key, or was never cached.
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				log.Warn("transport: cache: removing a temporary file", zap.String("file", name), zap.Error(err))
			}
		case strings.HasSuffix(name, cacheExt) && de.Type().IsRegular():
			data, err := c.read(name)
			if err != nil {
				log.Warn("transport: cache: unreadable file skipped", zap.String("file", name), zap.Error(err))
				continue
			}
			r, _, err := decodeRecord(data)
			if err == nil && fileName(r.Key) != name {
				err = fmt.Errorf("the key %q belongs in %s", r.Key, fileName(r.Key))
			}
			if err != nil {
				log.Warn("transport: cache: invalid file skipped", zap.String("file", name), zap.Error(err))
				continue
			}
			c.entries[r.Key] = cacheEntry{seq: r.Seq, final: r.Final}
			c.seq = max(c.seq, r.Seq)
		}
	}
	return c, nil
}

// maxRecord is the size of the largest file a message of at most
// maxMessage bytes makes: its body in base64, and room for the rest of the
// record, its key escaped in JSON among it.
func maxRecord(maxMessage int) int64 { return int64(maxMessage)/3*4 + 4 + 1<<20 }

// read reads the cache file name, refusing one over c.max bytes.
func (c *cache) read(name string) ([]byte, error) {
	f, err := os.Open(filepath.Join(c.dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, c.max+1))
	if err == nil && int64(len(data)) > c.max {
		err = fmt.Errorf("over %d bytes, more than a message within the link's limit makes", c.max)
	}
	return data, err
}

// put writes m as its key's file, replacing an earlier one, unless that
// one is final and m is not: a job's end must not be lost to a late
// progress report (m is then dropped, and put reports success, since what
// the master must learn is cached).
func (c *cache) put(m Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[m.Key]; ok && e.final && !m.Final {
		c.log.Debug("transport: cache: a progress after the job's end dropped", zap.String("key", m.Key))
		return nil
	}
	c.seq++
	data, err := encodeRecord(record{Key: m.Key, Final: m.Final, Seq: c.seq, Time: c.now()}, m.Body)
	if err != nil {
		return fmt.Errorf("transport: cache: %w", err)
	}
	if err := writeAtomic(c.dir, fileName(m.Key), data); err != nil {
		return fmt.Errorf("transport: cache: %w", err)
	}
	c.entries[m.Key] = cacheEntry{seq: c.seq, final: m.Final}
	return nil
}

// keys returns the cached keys, oldest first (by the last write of each).
func (c *cache) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.entries))
	for k := range c.entries {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(c.entries[a].seq, c.entries[b].seq), strings.Compare(a, b))
	})
	return keys
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// load reads key's message and the seq of its file; ok is false when the
// key is not cached. A file that cannot be read back is dropped from the
// index (and left on disk for a person to look at), so that replaying
// goes on with the others.
func (c *cache) load(key string) (m Message, seq uint64, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return Message{}, 0, false, nil
	}
	data, err := c.read(fileName(key))
	var r record
	var body []byte
	if err == nil {
		r, body, err = decodeRecord(data)
	}
	if err == nil && r.Key != key {
		err = fmt.Errorf("the file holds the key %q", r.Key)
	}
	if err != nil {
		delete(c.entries, key)
		return Message{}, 0, false, fmt.Errorf("transport: cache: %s: %w", fileName(key), err)
	}
	return Message{Key: key, Final: r.Final, Body: body}, e.seq, true, nil
}

// remove deletes key's file once its message has been sent, unless a
// later message has replaced it meanwhile (its seq differs): that one
// must still be sent.
func (c *cache) remove(key string, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; !ok || e.seq != seq {
		return
	}
	// Out of the index even if the file stays: it was sent, and a file
	// left behind is at worst sent again by a later run.
	delete(c.entries, key)
	if err := os.Remove(filepath.Join(c.dir, fileName(key))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("transport: cache: removing a sent message", zap.String("key", key), zap.Error(err))
		return
	}
	syncDir(c.dir)
}

// writeAtomic replaces dir/name with data so that a crash leaves either
// the old file or the new one, whole: a temporary file in the same
// directory, synced, renamed over the name, and the directory synced so
// that the rename itself survives.
func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, tempPrefix+"*"+tempSuffix)
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	syncDir(dir)
	return nil
}

// syncDir syncs a directory's entries where the system allows it; some
// file systems refuse, and then there is nothing better to do.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
