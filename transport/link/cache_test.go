package link

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCache_FileNames(t *testing.T) {
	for key, want := range map[string]string{
		"job-1_2.x": "job-1_2.x.json",
		"../x":      "..%2Fx.json",
		"a/b":       "a%2Fb.json",
		"..":        "...json",
		"":          ".json",
		"50%":       "50%25.json",
		"é ~":       "%C3%A9%20%7E.json",
		"a\x00b":    "a%00b.json",
	} {
		assert.Equal(t, want, fileName(key), "key %q", key)
	}
	long := strings.Repeat("x/", 300)
	name := fileName(long)
	assert.LessOrEqual(t, len(name), maxName)
	assert.Contains(t, name, "~")
	assert.NotEqual(t, name, fileName(long+"y"))
}

// A later message with the same key replaces the earlier one: one file
// per key, and only the latest is sent.
func TestCache_OneFilePerKeyLaterReplaces(t *testing.T) {
	s := newSetup(t, Config{})
	for _, b := range []string{"1", "2", "3"} {
		require.NoError(t, s.l.Send(ctx(t), msg("a", b)))
	}
	require.NoError(t, s.l.Send(ctx(t), final("b", "x")))
	require.NoError(t, s.l.Send(ctx(t), final("b", "y")))
	assert.ElementsMatch(t, []string{"a.json", "b.json"}, s.files(t))
	s.connected(t)
	assert.Equal(t, []string{"hello false", "send a 3", "send b final y", "online"}, s.m.Events())
}

// A final message is never replaced by a later progress.
func TestCache_FinalNotReplacedByProgress(t *testing.T) {
	s := newSetup(t, Config{})
	require.NoError(t, s.l.Send(ctx(t), final("a", "done")))
	require.NoError(t, s.l.Send(ctx(t), msg("a", "late")))
	s.connected(t)
	assert.Equal(t, []string{"hello false", "send a final done", "online"}, s.m.Events())
}

// Keys become file names that stay inside the directory, and read back.
func TestCache_KeysEscaped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs")
	keys := []string{"../x", "a/b", "/abs", "..", "", "é ~", strings.Repeat("k/", 200)}
	s := newSetup(t, Config{CacheDir: dir})
	for _, k := range keys {
		require.NoError(t, s.l.Send(ctx(t), msg(k, "p")))
	}
	require.NoError(t, s.l.Stop(ctx(t)))
	names := s.files(t)
	assert.Len(t, names, len(keys))
	for _, n := range names {
		assert.NotContains(t, n, "/")
	}
	entries, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing written beside the directory")

	again := newSetup(t, Config{CacheDir: dir})
	assert.Equal(t, keys, again.l.Cached())
	again.connected(t)
	assert.Len(t, again.m.Sent(), len(keys))
	for i, m := range again.m.Sent() {
		assert.Equal(t, keys[i], m.Key)
	}
}

// Every body reads back byte for byte (JSON kept readable when compact).
func TestCache_BodiesRoundTrip(t *testing.T) {
	bodies := map[string][]byte{
		"compact": []byte(`{"status":"Done","data":{"a":[1,2]}}`),
		"spaced":  []byte(`{ "status": "Done" }`),
		"html":    []byte(`{"s":"<a&b>"}`),
		"string":  []byte(`"text"`),
		"null":    []byte(`null`),
		"number":  []byte(`12`),
		"binary":  {0, 1, 2, 0xff, '\n'},
		"text":    []byte("not json"),
		"empty":   nil,
	}
	dir := t.TempDir()
	s := newSetup(t, Config{CacheDir: dir})
	for k, b := range bodies {
		require.NoError(t, s.l.Send(ctx(t), Message{Key: k, Body: b}))
	}
	require.NoError(t, s.l.Stop(ctx(t)))
	data, err := os.ReadFile(filepath.Join(dir, "compact.json"))
	require.NoError(t, err)
	assert.Contains(t, string(data), `"body":{"status":"Done","data":{"a":[1,2]}}`, "readable")

	again := newSetup(t, Config{CacheDir: dir})
	again.connected(t)
	sent := again.m.Sent()
	require.Len(t, sent, len(bodies))
	for _, m := range sent {
		assert.Equal(t, string(bodies[m.Key]), string(m.Body), m.Key)
		assert.False(t, m.Final)
	}
}

func TestCache_DirCreated0700(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "jobs")
	s := newSetup(t, Config{CacheDir: dir})
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	require.NoError(t, s.l.Send(ctx(t), msg("a", "1")))
	fi, err = os.Stat(filepath.Join(dir, "a.json"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// Writes are atomic: nothing but the key files remains; a crash's
// temporary file is removed, and files that do not read back are skipped
// (and left for a person to look at).
func TestCache_AtomicAndTolerant(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".tmp-123.part"), []byte(`{"key":"a"`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"key":`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "wrong.json"), []byte(`{"key":"other","seq":1}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte(`hello`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok.json"), []byte(`{"key":"ok","final":true,"seq":7,"body":{"x":1}}`), 0o600))
	s := newSetup(t, Config{CacheDir: dir})
	assert.Equal(t, []string{"ok"}, s.l.Cached())
	for i := range 20 {
		require.NoError(t, s.l.Send(ctx(t), msg("k", string(rune('a'+i)))))
	}
	assert.ElementsMatch(t, []string{"bad.json", "wrong.json", "notes.txt", "ok.json", "k.json"}, s.files(t))
	assert.Equal(t, []string{"ok", "k"}, s.l.Cached(), "seq continues after the earlier run's")
	s.connected(t)
	assert.Equal(t, []string{"hello false", `send ok final {"x":1}`, "send k t", "online"}, s.m.Events())
	assert.ElementsMatch(t, []string{"bad.json", "wrong.json", "notes.txt"}, s.files(t))
}

// A cached file that disappears or goes bad before the replay is skipped;
// the others are still sent.
func TestCache_ReplaySkipsUnreadable(t *testing.T) {
	s := newSetup(t, Config{})
	require.NoError(t, s.l.Send(ctx(t), msg("a", "1")))
	require.NoError(t, s.l.Send(ctx(t), msg("b", "1")))
	require.NoError(t, s.l.Send(ctx(t), msg("c", "1")))
	require.NoError(t, os.Remove(filepath.Join(s.dir, "a.json")))
	require.NoError(t, os.WriteFile(filepath.Join(s.dir, "b.json"), []byte("{"), 0o600))
	s.connected(t)
	assert.Equal(t, []string{"hello false", "send c 1", "online"}, s.m.Events())
	assert.Empty(t, s.l.Cached())
}

// Config.MaxMessage bounds both ends: Send refuses a larger body (neither
// sent nor cached), and a cache file larger than a message within the
// limit makes is skipped when the cache is read, not read into memory;
// the others are replayed.
func TestCache_MaxMessage(t *testing.T) {
	const limit = 1000
	s := newSetup(t, Config{MaxMessage: limit})
	require.NoError(t, s.l.Send(ctx(t), Message{Key: "fits", Final: true, Body: bytes.Repeat([]byte{0}, limit)}))
	err := s.l.Send(ctx(t), Message{Key: "big", Final: true, Body: bytes.Repeat([]byte{0}, limit+1)})
	require.ErrorIs(t, err, ErrMessageTooLarge)
	assert.ErrorContains(t, err, "big: 1001 bytes, limit 1000")
	assert.Equal(t, []string{"fits"}, s.l.Cached(), "the message over the limit is not cached")

	dir := t.TempDir()
	huge := append([]byte(`{"key":"huge","final":true,"seq":1,"bytes":"`), bytes.Repeat([]byte("A"), 2<<20)...)
	huge = append(huge, `"}`...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "huge.json"), huge, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok.json"), []byte(`{"key":"ok","final":true,"seq":2,"body":{"x":1}}`), 0o600))
	r := newSetup(t, Config{CacheDir: dir, MaxMessage: limit})
	assert.Equal(t, []string{"ok"}, r.l.Cached(), "the file over the limit is skipped")
	r.connected(t)
	assert.Equal(t, []string{"hello false", `send ok final {"x":1}`, "online"}, r.m.Events())
	assert.ElementsMatch(t, []string{"huge.json"}, r.files(t), "left on disk for a person to look at")
}

// FuzzDecodeRecord: a cache file, whatever it holds (a crash or a person
// may have cut or edited it), is refused, or read as a message that is
// written and read back the same. Seeds: testdata/fuzz/FuzzDecodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		r, body, err := decodeRecord(data)
		if err != nil {
			return
		}
		enc, err := encodeRecord(record{Key: r.Key, Final: r.Final, Seq: r.Seq, Time: r.Time}, body)
		require.NoError(t, err)
		r2, body2, err := decodeRecord(enc)
		require.NoError(t, err, "%s", enc)
		require.Equal(t, r.Key, r2.Key)
		require.Equal(t, r.Final, r2.Final)
		require.Equal(t, r.Seq, r2.Seq)
		require.True(t, bytes.Equal(body, body2), "body %q read back as %q", body, body2)
	})
}
