package fuq

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// vector is a message of fuq-wire-vectors.txt: the bytes the reference
// encoder wrote for it, header and body in hex.
type vector struct {
	name string
	msg  Message
	hdr  string
	body string
}

var echoJob = JobDescription{
	JobId:      7,
	Name:       "j",
	NumTasks:   10,
	WorkingDir: "/w",
	LoggingDir: "/l",
	Command:    "/bin/echo",
	Status:     JobRunning,
}

// vectors are the golden messages. Where a list is empty the Message holds
// nil, which is what the decoder gives back for an empty array (and which
// encodes as the empty array 0x90 the reference wrote).
var vectors = []vector{
	{
		name: "OK",
		msg:  Message{Header: Header{Type: TypeOK, Seq: 0, Arg0: PackOK(4, 1)}},
		hdr:  "47c00100000000000000000001000400",
	},
	{
		name: "JOB",
		msg: Message{
			Header: Header{Type: TypeJob, Seq: 1, Arg0: 0x66},
			Tasks:  []Task{{Task: 3, JobDescription: echoJob}},
		},
		hdr: "47c00300010000000000000066000000",
		body: "9182a45461736b03ae4a6f624465736372697074696f6e87a54a6f62496407a44e616d65a16aa84e756d5461736b730a" +
			"aa576f726b696e67446972a22f77aa4c6f6767696e67446972a22f6ca7436f6d6d616e64a92f62696e2f6563686f" +
			"a653746174757301",
	},
	{
		name: "UPDATE",
		msg: Message{
			Header: Header{Type: TypeUpdate, Seq: 2, Arg0: 0x2b},
			Update: &StatusUpdate{JobId: 7, Task: 3, Success: true, Status: "done"},
		},
		hdr:  "47c0040002000000000000002b000000",
		body: "85a54a6f62496407a45461736b03a753756363657373c3a6537461747573a4646f6e65a64e65774a6f62c0",
	},
	{
		name: "UPDATE+NewJob",
		msg: Message{
			Header: Header{Type: TypeUpdate, Seq: 4, Arg0: 0x36},
			Update: &StatusUpdate{JobId: 7, Task: 3, Success: false, Status: "exit 1", NewJob: &JobRequest{NumProc: 2}},
		},
		hdr:  "47c00400040000000000000036000000",
		body: "85a54a6f62496407a45461736b03a753756363657373c2a6537461747573a6657869742031a64e65774a6f6281a74e756d50726f6302",
	},
	{
		name: "CANCEL",
		msg: Message{
			Header: Header{Type: TypeCancel, Seq: 3, Arg0: 0x0f},
			Cancel: []TaskPair{{JobId: 7, Task: 3}},
		},
		hdr:  "47c0050003000000000000000f000000",
		body: "9182a54a6f62496407a45461736b03",
	},
	{
		name: "HELLO",
		msg: Message{
			Header: Header{Type: TypeHello, Seq: 0, Arg0: 0x14},
			Hello:  &Hello{NumProcs: 4},
		},
		hdr:  "47c00200000000000000000014000000",
		body: "82a84e756d50726f637304a752756e6e696e6790",
	},
	{
		name: "STOP",
		msg:  Message{Header: Header{Type: TypeStop, Seq: 5, Arg0: StopImmediate}},
		hdr:  "47c007000500000000000000ffffffff",
	},
	{
		name: "RESET",
		msg:  Message{Header: Header{Type: TypeReset, Seq: 9, Arg0: 8}},
		hdr:  "47c00900090000000000000008000000",
	},
	{
		name: "ERROR",
		msg:  Message{Header: Header{Type: TypeError, Code: CodeNoProcs, Seq: 6}},
		hdr:  "47c00802060000000000000000000000",
	},
}

func (v vector) bytes(t testing.TB) []byte {
	t.Helper()
	b, err := hex.DecodeString(v.hdr + v.body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenEncode(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			m := v.msg
			if m.Type.HasBody() {
				m.Arg0 = 12345 // ignored: set from the body
			}
			got, err := m.AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := v.hdr + v.body; hex.EncodeToString(got) != want {
				t.Errorf("encoded\n got %x\nwant %s", got, want)
			}
			// Appending after existing bytes leaves them alone.
			prefix := []byte("xyz")
			got2, err := m.AppendBinary(prefix)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got2[:3], prefix) || !bytes.Equal(got2[3:], got) {
				t.Errorf("appended to a prefix: %x", got2)
			}
		})
	}
}

func TestGoldenDecode(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			b := v.bytes(t)
			r := bytes.NewReader(b)
			got, err := ReadMessage(r, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, v.msg) {
				t.Errorf("decoded\n got %+v\nwant %+v", got, v.msg)
			}
			if r.Len() != 0 {
				t.Errorf("%d bytes left unread", r.Len())
			}
			h, err := ParseHeader(b)
			if err != nil || h != v.msg.Header {
				t.Errorf("ParseHeader = %+v, %v; want %+v", h, err, v.msg.Header)
			}
			if v.body != "" {
				bm, err := DecodeBody(h.Type, b[HeaderSize:])
				if err != nil {
					t.Fatal(err)
				}
				want := v.msg
				want.Header = Header{}
				if !reflect.DeepEqual(bm, want) {
					t.Errorf("DecodeBody\n got %+v\nwant %+v", bm, want)
				}
			}
		})
	}
}

func TestGoldenStream(t *testing.T) {
	// All the vectors back to back, read one after the other.
	var all []byte
	for _, v := range vectors {
		all = append(all, v.bytes(t)...)
	}
	r := bytes.NewReader(all)
	for _, v := range vectors {
		m, err := ReadMessage(r, 0)
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		if !reflect.DeepEqual(m, v.msg) {
			t.Errorf("%s: got %+v", v.name, m)
		}
	}
	if _, err := ReadMessage(r, 0); err != io.EOF {
		t.Errorf("after the last message: %v, want io.EOF", err)
	}
}

func TestEmptyLists(t *testing.T) {
	// Nil and empty lists both encode as 0x90; 0x90 and nil (0xc0, which the
	// reference writes for a nil slice) both decode as nil.
	for _, m := range []Message{
		{Header: Header{Type: TypeHello}},
		{Header: Header{Type: TypeHello}, Hello: &Hello{Running: []Task{}}},
	} {
		b, err := m.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := hex.EncodeToString(b[HeaderSize:]), "82a84e756d50726f637300a752756e6e696e6790"; got != want {
			t.Errorf("HELLO body %s, want %s", got, want)
		}
	}
	for _, typ := range []Type{TypeJob, TypeCancel} {
		for _, m := range []Message{
			{Header: Header{Type: typ}},
			{Header: Header{Type: typ}, Tasks: []Task{}, Cancel: []TaskPair{}},
		} {
			b, err := m.AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(b); got != "47c00"+string("0123456789"[typ])+"00000000000000000001000000"+"90" {
				t.Errorf("%s with no elements: %s", typ, got)
			}
		}
		for _, body := range []string{"90", "c0"} {
			m, err := DecodeBody(typ, mustHex(t, body))
			if err != nil || m.Tasks != nil || m.Cancel != nil {
				t.Errorf("%s body %s: %+v, %v", typ, body, m, err)
			}
		}
	}
	m, err := DecodeBody(TypeHello, mustHex(t, "82a84e756d50726f637304a752756e6e696e67c0"))
	if err != nil || !reflect.DeepEqual(m.Hello, &Hello{NumProcs: 4}) {
		t.Errorf("HELLO with nil Running: %+v, %v", m.Hello, err)
	}
	// A HELLO with arg0 = 0, as the spec allows when nothing runs.
	m, err = ReadMessage(bytes.NewReader(mustHex(t, "47c00200000000000000000000000000")), 0)
	if err != nil || !reflect.DeepEqual(m.Hello, &Hello{}) {
		t.Errorf("HELLO without a body: %+v, %v", m, err)
	}
	for _, typ := range []Type{TypeJob, TypeUpdate, TypeCancel} {
		if _, err := DecodeBody(typ, nil); !isProtocolError(err) {
			t.Errorf("empty %s body: %v, want a *ProtocolError", typ, err)
		}
	}
}

func TestTolerantDecode(t *testing.T) {
	// Keys in another order, an unknown key, ints in wider formats than
	// needed (uint16 for JobId, int8 for Task).
	body := mustHex(t, "86"+
		"a6537461747573a178"+
		"a5457874726191c3"+
		"a45461736bd003"+
		"a753756363657373c3"+
		"a64e65774a6f6282a3466f6fa0a74e756d50726f63cd0100"+
		"a54a6f624964cd0007")
	m, err := DecodeBody(TypeUpdate, body)
	if err != nil {
		t.Fatal(err)
	}
	want := &StatusUpdate{JobId: 7, Task: 3, Success: true, Status: "x", NewJob: &JobRequest{NumProc: 256}}
	if !reflect.DeepEqual(m.Update, want) {
		t.Errorf("got %+v, want %+v", m.Update, want)
	}
}

func TestIntEncoding(t *testing.T) {
	// Non-negative ints take the unsigned formats, as the reference writes
	// them; negative ones the signed formats.
	for _, c := range []struct {
		n    int
		want string
	}{
		{0, "00"}, {127, "7f"}, {128, "cc80"}, {255, "ccff"}, {256, "cd0100"},
		{65536, "ce00010000"}, {1 << 32, "cf0000000100000000"},
		{-1, "ff"}, {-32, "e0"}, {-33, "d0df"}, {-129, "d1ff7f"},
	} {
		b, err := JobRequest{NumProc: c.n}.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(b[9:]); got != c.want {
			t.Errorf("%d encodes as %s, want %s", c.n, got, c.want)
		}
		var back JobRequest
		if _, err := back.UnmarshalMsg(b); err != nil || back.NumProc != c.n {
			t.Errorf("%d decodes as %d, %v", c.n, back.NumProc, err)
		}
	}
}

func TestRoundTripBig(t *testing.T) {
	long := strings.Repeat("x", 70000)
	job := JobDescription{JobId: 1 << 40, Name: long, NumTasks: 300, WorkingDir: strings.Repeat("w", 40),
		LoggingDir: "", Command: "/bin/true", Status: JobCancelled}
	var tasks []Task
	for i := 1; i <= 20; i++ {
		tasks = append(tasks, Task{Task: i, JobDescription: job})
	}
	for _, m := range []Message{
		{Header: Header{Type: TypeJob, Seq: 0xFFFFFFFF}, Tasks: tasks},
		{Header: Header{Type: TypeHello, Seq: 2}, Hello: &Hello{NumProcs: 64, Running: tasks}},
		{Header: Header{Type: TypeCancel, Seq: 7}, Cancel: []TaskPair{{JobId: 1, Task: -1}, {JobId: 1 << 63, Task: 1 << 40}}},
		{Header: Header{Type: TypeUpdate, Seq: 8}, Update: &StatusUpdate{JobId: 9, Task: 1, Status: long, NewJob: &JobRequest{}}},
	} {
		b, err := m.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadMessage(bytes.NewReader(b), 0)
		if err != nil {
			t.Fatalf("%s: %v", m.Type, err)
		}
		m.Arg0 = uint32(len(b) - HeaderSize)
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s did not survive the round trip", m.Type)
		}
	}
}

func isProtocolError(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe)
}

func TestHeaderErrors(t *testing.T) {
	good := mustHex(t, "47c00100000000000000000001000400")

	bad := bytes.Clone(good)
	bad[0], bad[1] = 0xc0, 0x47 // big-endian magic
	if _, err := ParseHeader(bad); !isProtocolError(err) {
		t.Errorf("wrong magic: %v", err)
	}
	if _, err := ReadMessage(bytes.NewReader(bad), 0); !isProtocolError(err) {
		t.Errorf("wrong magic from ReadMessage: %v", err)
	}
	for _, typ := range []byte{0, 10, 0xff} {
		bad := bytes.Clone(good)
		bad[2] = typ
		_, err := ParseHeader(bad)
		if !isProtocolError(err) {
			t.Errorf("type %d: %v", typ, err)
		}
		if _, err := ReadMessage(bytes.NewReader(bad), 0); !isProtocolError(err) {
			t.Errorf("type %d from ReadMessage: %v", typ, err)
		}
		if _, err := (Header{Type: Type(typ)}).AppendBinary(nil); !isProtocolError(err) {
			t.Errorf("encoding type %d: %v", typ, err)
		}
		if _, err := (Message{Header: Header{Type: Type(typ)}}).AppendBinary(nil); !isProtocolError(err) {
			t.Errorf("encoding a message of type %d: %v", typ, err)
		}
	}
	// Padding and unknown codes are accepted; the padding is not kept.
	odd := bytes.Clone(good)
	copy(odd[8:12], "\x01\x02\x03\x04")
	odd[3] = 0x77
	h, err := ParseHeader(odd)
	if err != nil || h != (Header{Type: TypeOK, Code: 0x77, Arg0: 0x40001}) {
		t.Errorf("odd header: %+v, %v", h, err)
	}
	if got, _ := h.AppendBinary(nil); !bytes.Equal(got[8:12], []byte{0, 0, 0, 0}) {
		t.Errorf("padding written as %x", got[8:12])
	}

	if _, err := ParseHeader(good[:15]); err != io.ErrUnexpectedEOF {
		t.Errorf("short ParseHeader: %v", err)
	}
	if _, err := ReadMessage(bytes.NewReader(nil), 0); err != io.EOF {
		t.Errorf("empty stream: %v, want io.EOF", err)
	}
	for _, n := range []int{1, 15} {
		if _, err := ReadMessage(bytes.NewReader(good[:n]), 0); err != io.ErrUnexpectedEOF {
			t.Errorf("%d header bytes: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
	job := vectors[1].bytes(t)
	for _, n := range []int{HeaderSize, HeaderSize + 1, len(job) - 1} {
		if _, err := ReadMessage(bytes.NewReader(job[:n]), 0); err != io.ErrUnexpectedEOF {
			t.Errorf("JOB cut at %d: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
}

func TestPackOK(t *testing.T) {
	for _, c := range [][2]uint16{{0, 0}, {4, 1}, {1, 4}, {0xFFFF, 0}, {0, 0xFFFF}, {0xFFFF, 0xFFFF}, {0x1234, 0xABCD}} {
		a := PackOK(c[0], c[1])
		if np, nr := UnpackOK(a); np != c[0] || nr != c[1] {
			t.Errorf("PackOK(%d, %d) = %#x unpacks to %d, %d", c[0], c[1], a, np, nr)
		}
	}
	if a := PackOK(4, 1); a != 0x40001 {
		t.Errorf("PackOK(4, 1) = %#x, want 0x40001", a)
	}
	if a := PackOK(0xFFFF, 0xFFFF); a != 0xFFFFFFFF {
		t.Errorf("PackOK(0xFFFF, 0xFFFF) = %#x", a)
	}
}

func TestNames(t *testing.T) {
	want := []string{"Type(0)", "OK", "HELLO", "JOB", "UPDATE", "CANCEL", "LIST", "STOP", "ERROR", "RESET", "Type(10)"}
	for i, w := range want {
		if got := Type(i).String(); got != w {
			t.Errorf("Type(%d).String() = %q, want %q", i, got, w)
		}
	}
	for c, w := range map[Code]string{CodeNone: "none", CodeOverflow: "overflow", CodeNoProcs: "no_procs", 9: "Code(9)"} {
		if got := c.String(); got != w {
			t.Errorf("Code(%d).String() = %q, want %q", c, got, w)
		}
	}
	for s, w := range map[JobStatus]string{JobWaiting: "waiting", JobRunning: "running", JobFinished: "finished",
		JobPaused: "paused", JobCancelled: "cancelled", 5: "JobStatus(5)"} {
		if got := s.String(); got != w {
			t.Errorf("JobStatus(%d).String() = %q, want %q", int(s), got, w)
		}
	}
	for typ := Type(0); typ < 12; typ++ {
		want := typ == TypeHello || typ == TypeJob || typ == TypeUpdate || typ == TypeCancel
		if typ.HasBody() != want {
			t.Errorf("%s.HasBody() = %v", typ, !want)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	if _, err := (Message{Header: Header{Type: TypeUpdate}}).AppendBinary(nil); err == nil {
		t.Error("UPDATE without Update encoded")
	}
	// Body fields of other types are ignored.
	b, err := Message{Header: Header{Type: TypeOK, Arg0: 3}, Hello: &Hello{NumProcs: 1}, Tasks: []Task{{}}}.AppendBinary(nil)
	if err != nil || len(b) != HeaderSize {
		t.Errorf("OK with body fields: %x, %v", b, err)
	}
	if _, err := DecodeBody(TypeOK, []byte{0x90}); !isProtocolError(err) {
		t.Errorf("DecodeBody(OK): %v", err)
	}
}

// totalAlloc returns the bytes allocated so far by the program.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

func TestBodyTooLarge(t *testing.T) {
	hdr, err := Header{Type: TypeJob, Seq: 1, Arg0: 0xFFFFFFFF}.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(hdr)
	before := totalAlloc()
	allocs := testing.AllocsPerRun(10, func() {
		r.Reset(hdr)
		m, err := ReadMessage(r, 1<<20)
		if !errors.Is(err, ErrBodyTooLarge) {
			t.Fatalf("got %v, want ErrBodyTooLarge", err)
		}
		if m.Header.Seq != 1 {
			t.Errorf("header not returned: %+v", m.Header)
		}
	})
	if d := totalAlloc() - before; d > 1<<20 {
		t.Errorf("%d bytes allocated", d)
	}
	if allocs > 10 {
		t.Errorf("%v allocations", allocs)
	}
	// The default limit applies when maxBody <= 0, and a body at the limit
	// is read.
	for _, max := range []int{0, -1} {
		hdr, _ := Header{Type: TypeHello, Arg0: DefaultMaxBody + 1}.AppendBinary(nil)
		if _, err := ReadMessage(bytes.NewReader(hdr), max); !errors.Is(err, ErrBodyTooLarge) {
			t.Errorf("maxBody %d: %v", max, err)
		}
	}
	cancel := vectors[4].bytes(t)
	if _, err := ReadMessage(bytes.NewReader(cancel), len(cancel)-HeaderSize); err != nil {
		t.Errorf("body at the limit: %v", err)
	}
	if _, err := ReadMessage(bytes.NewReader(cancel), len(cancel)-HeaderSize-1); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("body one past the limit: %v", err)
	}
}

func TestHugeCounts(t *testing.T) {
	for _, c := range []struct {
		typ  Type
		body string
	}{
		{TypeJob, "ddffffffff808080"},                 // array of 2^32-1 tasks in 3 bytes
		{TypeCancel, "ddffffffff808080"},              // array of 2^32-1 pairs in 3 bytes
		{TypeHello, "dfffffffffa15800"},               // map of 2^32-1 entries in 3 bytes
		{TypeUpdate, "dfffffffffa15800"},              // the same
		{TypeHello, "81a752756e6e696e67ddffffffff80"}, // Running of 2^32-1 tasks in 1 byte
		{TypeJob, "91dfffffffff"},                     // a task of 2^32-1 keys in 0 bytes
		{TypeJob, "dd0001869f808080"},                 // 99999 tasks, under the limit, in 3 bytes
		{TypeCancel, "dc7fff808080"},                  // 32767 pairs in 3 bytes
		{TypeHello, "81a752756e6e696e67dd0001869f80"}, // Running of 99999 tasks in 1 byte
	} {
		body := mustHex(t, c.body)
		var err error
		before := totalAlloc()
		allocs := testing.AllocsPerRun(10, func() {
			_, err = DecodeBody(c.typ, body)
		})
		if d := totalAlloc() - before; d > 11*4096 {
			t.Errorf("%s %s: %d bytes allocated in 11 runs", c.typ, c.body, d)
		}
		if !isProtocolError(err) {
			t.Errorf("%s %s: %v, want a *ProtocolError", c.typ, c.body, err)
		}
		if !errors.Is(err, msgp.ErrShortBytes) {
			t.Errorf("%s %s: %v does not wrap msgp.ErrShortBytes", c.typ, c.body, err)
		}
		if want := "fuq: protocol error: bad " + c.typ.String() + " body: msgp: "; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s %s: error %q, want it to start with %q", c.typ, c.body, err, want)
		}
		if allocs >= 10 {
			t.Errorf("%s %s: %v allocations", c.typ, c.body, allocs)
		}
	}
	// As many elements as the count claims are accepted.
	body := append(mustHex(t, "dc7fff"), bytes.Repeat([]byte{0x80}, 0x7fff)...)
	if m, err := DecodeBody(TypeJob, body); err != nil || len(m.Tasks) != 0x7fff {
		t.Errorf("32767 empty tasks: %d, %v", len(m.Tasks), err)
	}
	// More elements than the limit, each present.
	body = append(mustHex(t, "dd000186a1"), bytes.Repeat([]byte{0x80}, 100001)...)
	if _, err := DecodeBody(TypeJob, body); !errors.Is(err, msgp.ErrLimitExceeded) || !isProtocolError(err) {
		t.Errorf("100001 tasks: %v", err)
	}
	// A map of more than 64 keys.
	body = mustHex(t, "de0041")
	for i := 0; i < 0x41; i++ {
		body = append(body, 0xa1, byte(i), 0xc0)
	}
	if _, err := DecodeBody(TypeUpdate, body); !errors.Is(err, msgp.ErrLimitExceeded) {
		t.Errorf("65 keys: %v", err)
	}
}

func TestMalformedBodies(t *testing.T) {
	for _, c := range []struct {
		typ  Type
		body string
	}{
		{TypeCancel, "9182a54a6f62496407a45461736b03c0"},      // trailing byte
		{TypeCancel, "9182a54a6f62496407a45461736b0390"},      // trailing value
		{TypeUpdate, "9182a54a6f62496407a45461736b03"},        // array, not a map
		{TypeJob, "82a84e756d50726f637304a752756e6e696e6790"}, // map, not an array
		{TypeJob, "9101"},                                       // element not a map
		{TypeCancel, "9181a54a6f624964ff"},                      // negative JobId
		{TypeCancel, "9181a45461736bcfffffffffffffffff"},        // Task overflows int
		{TypeUpdate, "81a64e65774a6f6203"},                      // NewJob not a map
		{TypeUpdate, "81a753756363657373a3796573"},              // Success not a bool
		{TypeHello, "82a84e756d50726f637304a752756e6e696e6781"}, // Running a map
		{TypeHello, "c1"},                                       // never used byte
		{TypeUpdate, "81a5"},                                    // truncated key
		{TypeJob, strings.Repeat("91", 200000) + "90"},          // too deep
	} {
		body := mustHex(t, c.body)
		m, err := DecodeBody(c.typ, body)
		if !isProtocolError(err) {
			t.Errorf("%s %.40s: %+v, %v; want a *ProtocolError", c.typ, c.body, m, err)
		}
		// Through ReadMessage: the header comes back and the stream stays
		// in step.
		msg := Message{Header: Header{Type: c.typ, Seq: 42, Arg0: uint32(len(body))}}
		stream, _ := msg.Header.AppendBinary(nil)
		stream = append(stream, body...)
		stream, _ = Message{Header: Header{Type: TypeOK, Seq: 43}}.AppendBinary(stream)
		r := bytes.NewReader(stream)
		got, err := ReadMessage(r, 0)
		if !isProtocolError(err) || got.Seq != 42 || got.Type != c.typ {
			t.Errorf("ReadMessage of a bad %s: %+v, %v", c.typ, got.Header, err)
		}
		if next, err := ReadMessage(r, 0); err != nil || next.Seq != 43 {
			t.Errorf("after a bad %s: %+v, %v", c.typ, next, err)
		}
	}
}

// FuzzHeader checks that ParseHeader never panics, and that an accepted
// header encodes to the bytes it came from, padding zeroed, and decodes to
// itself again.
func FuzzHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			if len(b) >= HeaderSize && !isProtocolError(err) {
				t.Fatalf("error %v is not a *ProtocolError", err)
			}
			return
		}
		enc, err := h.AppendBinary(nil)
		if err != nil {
			t.Fatalf("accepted header %+v does not encode: %v", h, err)
		}
		want := bytes.Clone(b[:HeaderSize])
		copy(want[8:12], []byte{0, 0, 0, 0})
		if !bytes.Equal(enc, want) {
			t.Fatalf("%+v encodes as %x, want %x", h, enc, want)
		}
		h2, err := ParseHeader(enc)
		if err != nil || h2 != h {
			t.Fatalf("%+v decodes again as %+v, %v", h, h2, err)
		}
	})
}

// fuzzBodyTypes maps FuzzBody's type byte to a body type: t%4, so that each
// real type number stands for itself.
var fuzzBodyTypes = [4]Type{TypeUpdate, TypeCancel, TypeHello, TypeJob}

// FuzzBody checks that DecodeBody never panics on any of the four bodies,
// and that an accepted body encodes to bytes that decode to the same value
// and encode to the same bytes again.
func FuzzBody(f *testing.F) {
	f.Fuzz(func(t *testing.T, typ uint8, body []byte) {
		tt := fuzzBodyTypes[typ%4]
		m, err := DecodeBody(tt, body)
		if err != nil {
			if !isProtocolError(err) {
				t.Fatalf("error %v is not a *ProtocolError", err)
			}
			return
		}
		m.Header = Header{Type: tt}
		enc, err := m.AppendBinary(nil)
		if err != nil {
			t.Fatalf("decoded %s body does not encode: %v", tt, err)
		}
		m2, err := DecodeBody(tt, enc[HeaderSize:])
		if err != nil {
			t.Fatalf("re-encoded %s body %x does not decode: %v", tt, enc[HeaderSize:], err)
		}
		m2.Header = m.Header
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("%s body changed in the round trip:\n%+v\n%+v", tt, m, m2)
		}
		enc2, err := m2.AppendBinary(nil)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("%s body encodes differently the second time: %x, %x, %v", tt, enc, enc2, err)
		}
	})
}
