package runexp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goldenSession is the captured session of the wire notes, message by message,
// with the Message each one is.
var goldenSession = []struct {
	name string
	msg  Message
	wire string
}{
	{"saluton", Message{Kind: KindSaluton, Host: "testhost"}, "SALUTON; MI testhost"},
	{"versio", Message{Kind: KindVersio, Version: Version}, "VERSIO 1.3"},
	{"komprenas", Message{Kind: KindKomprenas}, "KOMPRENAS"},
	{"aligi", Message{Kind: KindAligi, Group: DefaultGroup}, "ALIGI __defaulte__"},
	{"jes", Message{Kind: KindJes}, "JES"},
	{"peto", Message{Kind: KindPeto}, "PETO"},
	{"laboro", Message{Kind: KindLaboro, Name: "sub/okjob", Type: ".sh", Size: 43}, "LABORO sub/okjob .sh 43"},
	{"preta", Message{Kind: KindPreta}, "PRETA"},
	{"rezulto", Message{Kind: KindRezulto, Name: "sub/okjob", Status: Success, Size: 262}, "REZULTO sub/okjob success 262"},
	{"ricevis", Message{Kind: KindRicevis}, "RICEVIS"},
	{"fino", Message{Kind: KindFino}, "FINO"},
	{"fino-ankau", Message{Kind: KindFinoAnkau}, "FINO ANKAU"},
	{"eliri", Message{Kind: KindEliri}, "ELIRI"},
	{"atendi", Message{Kind: KindAtendi}, "ATENDI"},
}

func TestGoldenSession(t *testing.T) {
	for _, tc := range goldenSession {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.msg.AppendText(nil)
			require.NoError(t, err)
			assert.Equal(t, tc.wire, string(b), "bytes on the wire")
			assert.NotContains(t, string(b), "\n", "no terminator")
			assert.NotContains(t, string(b), "\r", "no terminator")
			assert.Equal(t, tc.wire, tc.msg.String())

			// AppendText appends: what was in the buffer stays.
			b, err = tc.msg.AppendText([]byte("prefix:"))
			require.NoError(t, err)
			assert.Equal(t, "prefix:"+tc.wire, string(b))

			got, err := Parse([]byte(tc.wire), 0)
			require.NoError(t, err)
			assert.Equal(t, tc.msg, got, "round trip")
		})
	}
}

func TestKindString(t *testing.T) {
	for _, tc := range goldenSession {
		keyword, _, _ := strings.Cut(tc.wire, " ")
		keyword = strings.TrimSuffix(keyword, ";")
		if tc.msg.Kind == KindFinoAnkau {
			keyword = tc.wire
		}
		assert.Equal(t, keyword, tc.msg.Kind.String(), tc.name)
	}
	assert.Equal(t, "SALUTON", KindSaluton.String())
	assert.Equal(t, "kind(0)", Kind(0).String())
	assert.Equal(t, "kind(200)", Kind(200).String())
	assert.Equal(t, "success", Success.String())
	assert.Equal(t, "failure", Failure.String())
}

func TestParseAcceptsOneTrailingNewline(t *testing.T) {
	for _, tc := range goldenSession {
		for _, nl := range []string{"\n", "\r\n"} {
			t.Run(tc.name+strconv.Quote(nl), func(t *testing.T) {
				got, err := Parse([]byte(tc.wire+nl), 0)
				require.NoError(t, err)
				assert.Equal(t, tc.msg, got)
			})
		}
	}
}

func TestParseRejectsJunkAfterNewline(t *testing.T) {
	junk := []string{"\n\n", "\r\n\r\n", "\n\r", "\r\r\n", " ", " \n", "\t", "\x00", "\n ", " \r\n"}
	for _, tc := range goldenSession {
		for _, j := range junk {
			t.Run(tc.name+strconv.Quote(j), func(t *testing.T) {
				in := []byte(tc.wire + j)
				m, err := Parse(in, 0)
				if tc.msg.Kind == KindAligi {
					// ALIGI's group is free text: a space, tab or NUL
					// at its end is part of it and survives a round
					// trip; a CR or LF does not, and must be refused.
					group := string(codecTrimNewline(in))[len("ALIGI "):]
					if !strings.ContainsAny(group, "\r\n") {
						require.NoError(t, err)
						assert.Equal(t, Message{Kind: KindAligi, Group: group}, m)
						return
					}
				}
				var pe *ProtocolError
				require.ErrorAs(t, err, &pe, "parsed as %#v", m)
			})
		}
	}
	t.Run("bare CR", func(t *testing.T) {
		for _, tc := range goldenSession {
			_, err := Parse([]byte(tc.wire+"\r"), 0)
			var pe *ProtocolError
			assert.ErrorAs(t, err, &pe, "%q", tc.wire+"\r")
		}
	})
}

func TestParseNamesAndResults(t *testing.T) {
	cases := []struct {
		in   string
		want Message
	}{
		{"LABORO my job/with space .sh 10", Message{Kind: KindLaboro, Name: "my job/with space", Type: ".sh", Size: 10}},
		{"LABORO a/b/c .m 0", Message{Kind: KindLaboro, Name: "a/b/c", Type: ".m", Size: 0}},
		{"LABORO x .tar.gz 7", Message{Kind: KindLaboro, Name: "x", Type: ".tar.gz", Size: 7}},
		{"LABORO x .sh 007", Message{Kind: KindLaboro, Name: "x", Type: ".sh", Size: 7}},
		{"LABORO a .sh 1 .sh 5", Message{Kind: KindLaboro, Name: "a .sh 1", Type: ".sh", Size: 5}},
		{"REZULTO x failure 0", Message{Kind: KindRezulto, Name: "x", Status: Failure, Size: 0}},
		{"REZULTO my job/with space success 12", Message{Kind: KindRezulto, Name: "my job/with space", Status: Success, Size: 12}},
		{"REZULTO success failure 1", Message{Kind: KindRezulto, Name: "success", Status: Failure, Size: 1}},
		{"SALUTON; MI a-b_C9", Message{Kind: KindSaluton, Host: "a-b_C9"}},
		{"VERSIO 2", Message{Kind: KindVersio, Version: "2"}},
		{"VERSIO 10.25", Message{Kind: KindVersio, Version: "10.25"}},
		{"ALIGI my group", Message{Kind: KindAligi, Group: "my group"}},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse([]byte(tc.in), 0)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			// And back: the name keeps its spaces and slashes.
			b, err := got.AppendText(nil)
			require.NoError(t, err)
			again, err := Parse(b, 0)
			require.NoError(t, err)
			assert.Equal(t, got, again)
		})
	}
}

func TestParseRejects(t *testing.T) {
	cases := []string{
		"",
		"\n",
		"\r\n",
		" ",
		"SALUTON; MI bad host",
		"SALUTON; MI a.b",
		"SALUTON; MI ",
		"SALUTON; MI",
		"SALUTON;MI x",
		"SALUTON MI x",
		"saluton; mi x",
		"VERSIO x",
		"VERSIO 1.",
		"VERSIO .3",
		"VERSIO 1.3.1",
		"VERSIO ",
		"VERSIO",
		"VERSIO -1",
		"ALIGI ",
		"ALIGI",
		"LABORO name sh 1",
		"LABORO .sh 1",
		"LABORO  .sh 1",
		"LABORO n . 1",
		"LABORO n .sh -1",
		"LABORO n .sh 1x",
		"LABORO n .sh +1",
		"LABORO n .sh 0x10",
		"LABORO n .sh 1.5",
		"LABORO n .sh ",
		"LABORO n .sh",
		"LABORO n 1",
		"LABORO",
		"REZULTO n maybe 3",
		"REZULTO n SUCCESS 3",
		"REZULTO success 3",
		"REZULTO  success 3",
		"REZULTO n success -3",
		"REZULTO n success x",
		"REZULTO n success",
		"peto",
		"Peto",
		"PETO ",
		" PETO",
		"PETO PETO",
		"FINO  ANKAU",
		"FINO ankau",
		"FINOANKAU",
		"KOMPRENAS\x00",
		"RICEVIS\n\n",
		"HELLO",
	}
	for _, in := range cases {
		t.Run(strconv.Quote(in), func(t *testing.T) {
			m, err := Parse([]byte(in), 0)
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe, "parsed as %#v", m)
			assert.Equal(t, Message{}, m)
			assert.NotErrorIs(t, err, ErrSizeTooLarge)
			assert.NotErrorIs(t, err, ErrMessageTooLong)
			assert.True(t, strings.HasPrefix(err.Error(), "runexp: protocol error: "), err.Error())
		})
	}
}

func TestParseSizeLimits(t *testing.T) {
	t.Run("above maxSize", func(t *testing.T) {
		_, err := Parse([]byte("LABORO n .sh 1025"), 1024)
		require.ErrorIs(t, err, ErrSizeTooLarge)
		_, err = Parse([]byte("REZULTO n success 1025"), 1024)
		require.ErrorIs(t, err, ErrSizeTooLarge)
	})
	t.Run("at maxSize", func(t *testing.T) {
		m, err := Parse([]byte("LABORO n .sh 1024"), 1024)
		require.NoError(t, err)
		assert.Equal(t, int64(1024), m.Size)
	})
	t.Run("30 digits", func(t *testing.T) {
		in := []byte("LABORO n .sh " + strings.Repeat("9", 30))
		_, err := Parse(in, 0)
		require.ErrorIs(t, err, ErrSizeTooLarge)
		_, err = Parse([]byte("REZULTO n failure "+strings.Repeat("1", 30)), 1024)
		require.ErrorIs(t, err, ErrSizeTooLarge)

		// Refusing the size allocates nothing of its order: a few small
		// strings for the error at most.
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 100 {
			_, _ = Parse(in, 0)
		}
		runtime.ReadMemStats(&after)
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(100*4096), "bytes allocated by 100 refusals")
	})
	t.Run("int64 overflow", func(t *testing.T) {
		_, err := Parse([]byte("LABORO n .sh 9223372036854775808"), 1<<62)
		require.ErrorIs(t, err, ErrSizeTooLarge)
		m, err := Parse([]byte("LABORO n .sh 9223372036854775807"), 1<<63-1)
		require.NoError(t, err)
		assert.Equal(t, int64(1<<63-1), m.Size)
	})
	t.Run("maxSize 0 means DefaultMaxSize", func(t *testing.T) {
		for _, max := range []int64{0, -1} {
			m, err := Parse([]byte("LABORO n .sh "+strconv.Itoa(DefaultMaxSize)), max)
			require.NoError(t, err)
			assert.Equal(t, int64(DefaultMaxSize), m.Size)
			_, err = Parse([]byte("LABORO n .sh "+strconv.Itoa(DefaultMaxSize+1)), max)
			require.ErrorIs(t, err, ErrSizeTooLarge)
			_, err = Parse([]byte("REZULTO n success "+strconv.Itoa(DefaultMaxSize+1)), max)
			require.ErrorIs(t, err, ErrSizeTooLarge)
		}
	})
	t.Run("message too long", func(t *testing.T) {
		in := []byte("LABORO " + strings.Repeat("n", MaxMessage+1-len("LABORO  .sh 1")) + " .sh 1")
		require.Len(t, in, MaxMessage+1)
		_, err := Parse(in, 0)
		require.ErrorIs(t, err, ErrMessageTooLong)
		var pe *ProtocolError
		assert.False(t, errors.As(err, &pe))

		_, err = Parse(bytes.Repeat([]byte("x"), 1<<20), 0)
		require.ErrorIs(t, err, ErrMessageTooLong)

		// One byte less is a message.
		m, err := Parse(in[1:], 0)
		require.Error(t, err) // "ABORO …" is no keyword …
		m, err = Parse(append([]byte("LABORO "), in[8:]...), 0)
		require.NoError(t, err) // … but a shorter name is.
		assert.Len(t, m.Name, MaxMessage-len("LABORO  .sh 1"))
	})
}

func TestAppendTextRefusesInvalid(t *testing.T) {
	cases := []struct {
		name string
		msg  Message
	}{
		{"host with a space", Message{Kind: KindSaluton, Host: "bad host"}},
		{"host with a dot", Message{Kind: KindSaluton, Host: "a.b"}},
		{"empty host", Message{Kind: KindSaluton}},
		{"type without dot", Message{Kind: KindLaboro, Name: "n", Type: "sh", Size: 1}},
		{"type only a dot", Message{Kind: KindLaboro, Name: "n", Type: ".", Size: 1}},
		{"type with a space", Message{Kind: KindLaboro, Name: "n", Type: ".s h", Size: 1}},
		{"empty type", Message{Kind: KindLaboro, Name: "n", Size: 1}},
		{"job without name", Message{Kind: KindLaboro, Type: ".sh", Size: 1}},
		{"negative job size", Message{Kind: KindLaboro, Name: "n", Type: ".sh", Size: -1}},
		{"result without name", Message{Kind: KindRezulto, Size: 1}},
		{"negative result size", Message{Kind: KindRezulto, Name: "n", Status: Success, Size: -1}},
		{"empty group", Message{Kind: KindAligi}},
		{"zero kind", Message{}},
		{"unknown kind", Message{Kind: 99}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.msg.AppendText([]byte("keep"))
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "keep", string(b), "the buffer is returned unchanged")
			assert.Equal(t, err.Error(), tc.msg.String())
		})
	}
}

// codecTCPPair returns both ends of a loopback TCP connection, closed at the
// end of the test.
func codecTCPPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	ca, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	cb := <-accepted
	require.NotNil(t, cb)
	t.Cleanup(func() {
		ca.Close()
		cb.Close()
	})
	return ca.(*net.TCPConn), cb.(*net.TCPConn)
}

// codecCountingConn counts the Writes and Reads that reach the socket.
type codecCountingConn struct {
	*net.TCPConn
	writes, reads int
}

func (c *codecCountingConn) Write(p []byte) (int, error) { c.writes++; return c.TCPConn.Write(p) }
func (c *codecCountingConn) Read(p []byte) (int, error)  { c.reads++; return c.TCPConn.Read(p) }

// codecPeer runs f in a goroutine and waits for it at the end of the test.
func codecPeer(t *testing.T, f func()) {
	var wg sync.WaitGroup
	wg.Go(f)
	t.Cleanup(wg.Wait)
}

func TestConnRoundTrip(t *testing.T) {
	a, b := codecTCPPair(t)
	ca := &codecCountingConn{TCPConn: a}
	cb := &codecCountingConn{TCPConn: b}
	runner := &conn{rw: ca, timeout: 5 * time.Second}
	manager := &conn{rw: cb, timeout: 5 * time.Second}

	// Lock-step, as a session goes: each message goes one way, the next
	// one the other way, so no two are ever in flight together.
	for i, tc := range goldenSession {
		from, to := runner, manager
		if i%2 == 1 {
			from, to = manager, runner
		}
		w0, r0 := ca.writes+cb.writes, ca.reads+cb.reads
		require.NoError(t, from.write(tc.msg), tc.name)
		got, err := to.read(false)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.msg, got, tc.name)
		assert.Equal(t, 1, ca.writes+cb.writes-w0, "%s: one Write per message", tc.name)
		assert.Equal(t, 1, ca.reads+cb.reads-r0, "%s: one Read per message", tc.name)
	}

	// expect checks the kind.
	require.NoError(t, runner.write(Message{Kind: KindPeto}))
	m, err := manager.expect(KindPeto)
	require.NoError(t, err)
	assert.Equal(t, Message{Kind: KindPeto}, m)
	require.NoError(t, manager.write(Message{Kind: KindFino}))
	_, err = runner.expect(KindLaboro)
	var pe *ProtocolError
	require.ErrorAs(t, err, &pe)

	// An invalid message is refused before anything is written.
	w0 := ca.writes
	require.ErrorAs(t, runner.write(Message{Kind: KindSaluton, Host: "bad host"}), &pe)
	assert.Equal(t, w0, ca.writes)

	// A message of exactly MaxMessage bytes goes through.
	long := Message{Kind: KindLaboro, Name: strings.Repeat("n", MaxMessage-len("LABORO  .sh 1")), Type: ".sh", Size: 1}
	require.Len(t, long.String(), MaxMessage)
	require.NoError(t, manager.write(long))
	m, err = runner.read(false)
	require.NoError(t, err)
	assert.Equal(t, long, m)
}

func TestConnReadPayloadInPieces(t *testing.T) {
	a, b := codecTCPPair(t)
	c := &conn{rw: a, timeout: 5 * time.Second}
	payload := []byte("#!/bin/bash\necho RES:ok\necho hello, world!\n")
	require.Len(t, payload, 43)
	next := "PRETA"
	codecPeer(t, func() {
		for i := 0; i < len(payload); i += 5 {
			if _, err := b.Write(payload[i:min(i+5, len(payload))]); err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		// The next message right behind the payload: readPayload must
		// not consume it.
		b.Write([]byte(next))
	})
	var got bytes.Buffer
	require.NoError(t, c.readPayload(&got, int64(len(payload))))
	assert.Equal(t, string(payload), got.String())
	m, err := c.read(false)
	require.NoError(t, err)
	assert.Equal(t, Message{Kind: KindPreta}, m)
}

func TestConnReadPayloadStopsAtSize(t *testing.T) {
	a, b := codecTCPPair(t)
	c := &conn{rw: a, timeout: 5 * time.Second}
	// Payload and the following message in one write: readPayload takes
	// exactly its bytes and leaves the rest for read.
	_, err := b.Write([]byte("0123456789RICEVIS"))
	require.NoError(t, err)
	var got bytes.Buffer
	require.NoError(t, c.readPayload(&got, 10))
	assert.Equal(t, "0123456789", got.String())
	m, err := c.read(false)
	require.NoError(t, err)
	assert.Equal(t, Message{Kind: KindRicevis}, m)

	// A zero-byte payload reads nothing.
	got.Reset()
	require.NoError(t, c.readPayload(&got, 0))
	assert.Zero(t, got.Len())
}

func TestConnReadPayloadPeerClosesEarly(t *testing.T) {
	a, b := codecTCPPair(t)
	c := &conn{rw: a, timeout: 5 * time.Second}
	codecPeer(t, func() {
		b.Write([]byte("only 12 byte"))
		b.Close()
	})
	var got bytes.Buffer
	err := c.readPayload(&got, 43)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, "only 12 byte", got.String())
}

type codecFailingWriter struct{}

var errCodecWriter = errors.New("disk full")

func (codecFailingWriter) Write([]byte) (int, error) { return 0, errCodecWriter }

func TestConnReadPayloadWriterFails(t *testing.T) {
	a, b := codecTCPPair(t)
	c := &conn{rw: a, timeout: 5 * time.Second}
	_, err := b.Write([]byte("abc"))
	require.NoError(t, err)
	require.ErrorIs(t, c.readPayload(codecFailingWriter{}, 3), errCodecWriter)
}

func TestConnReadTooLong(t *testing.T) {
	for _, n := range []int{MaxMessage + 1, 2000, 64 << 10} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			a, b := codecTCPPair(t)
			c := &conn{rw: a, timeout: 5 * time.Second}
			msg := []byte("LABORO " + strings.Repeat("n", n))
			msg = msg[:n]
			codecPeer(t, func() { b.Write(msg) })
			// The one Read must see more than MaxMessage bytes.
			codecQueued(t, a, min(n, len(c.buf)))
			_, err := c.read(false)
			require.ErrorIs(t, err, ErrMessageTooLong)
		})
	}
}

// codecQueued waits until at least n bytes wait to be read on c.
func codecQueued(t *testing.T, c *net.TCPConn, n int) {
	t.Helper()
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	buf := make([]byte, n)
	require.Eventually(t, func() bool {
		var k int
		rc.Control(func(fd uintptr) {
			k, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		})
		return k >= n
	}, 10*time.Second, time.Millisecond)
}

// Two messages in one Read, a message that gets no answer and the next,
// are read apart, even when together they are longer than MaxMessage.
func TestConnReadCoalesced(t *testing.T) {
	a, b := codecTCPPair(t)
	c := &conn{rw: a, timeout: 5 * time.Second}
	long := Message{Kind: KindRezulto, Name: strings.Repeat("n", MaxMessage-len("REZULTO  success 3")), Status: Success, Size: 3}
	require.Len(t, long.String(), MaxMessage)
	for _, second := range []Message{{Kind: KindPeto}, long} {
		_, err := b.Write([]byte("PRETA" + second.String()))
		require.NoError(t, err)
		codecQueued(t, a, len("PRETA")+len(second.String()))
		m, err := c.read(false)
		require.NoError(t, err)
		assert.Equal(t, Message{Kind: KindPreta}, m)
		m, err = c.read(false)
		require.NoError(t, err)
		assert.Equal(t, second, m)
	}
}

func TestConnReadSizeTooLarge(t *testing.T) {
	a, b := codecTCPPair(t)
	c := &conn{rw: a, timeout: 5 * time.Second, maxSize: 1024}
	_, err := b.Write([]byte("REZULTO n success " + strings.Repeat("9", 30)))
	require.NoError(t, err)
	_, err = c.read(false)
	require.ErrorIs(t, err, ErrSizeTooLarge)
	_, err = b.Write([]byte("LABORO n .sh 1025"))
	require.NoError(t, err)
	_, err = c.read(false)
	require.ErrorIs(t, err, ErrSizeTooLarge)
}

func TestConnReadTimeout(t *testing.T) {
	a, b := codecTCPPair(t)
	c := &conn{rw: a, timeout: 100 * time.Millisecond}
	start := time.Now()
	_, err := c.read(false)
	elapsed := time.Since(start)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "%v", err)
	assert.GreaterOrEqual(t, elapsed, 90*time.Millisecond)
	assert.Less(t, elapsed, 5*time.Second)

	// read(true) waits past the timeout: a runner may take hours
	// between requests.
	codecPeer(t, func() {
		time.Sleep(250 * time.Millisecond)
		b.Write([]byte("PETO"))
	})
	m, err := c.read(true)
	require.NoError(t, err)
	assert.Equal(t, Message{Kind: KindPeto}, m)
}

func TestConnReadPeerClosed(t *testing.T) {
	a, b := codecTCPPair(t)
	c := &conn{rw: a, timeout: 5 * time.Second}
	require.NoError(t, b.Close())
	_, err := c.read(false)
	require.ErrorIs(t, err, io.EOF)
}

func TestConnWritePayload(t *testing.T) {
	t.Run("exact", func(t *testing.T) {
		a, b := codecTCPPair(t)
		c := &conn{rw: a, timeout: 5 * time.Second}
		// Larger than one chunk, from a reader longer than n: exactly n
		// bytes go out.
		payload := bytes.Repeat([]byte("0123456789abcdef"), 10<<10)
		n := int64(len(payload) - 7)
		received := make(chan []byte, 1)
		codecPeer(t, func() {
			r := &conn{rw: b, timeout: 5 * time.Second}
			var got bytes.Buffer
			if err := r.readPayload(&got, n); err != nil {
				received <- nil
				return
			}
			received <- got.Bytes()
		})
		src := bytes.NewReader(payload)
		require.NoError(t, c.writePayload(src, n))
		assert.Equal(t, 7, src.Len(), "the rest of the reader is left unread")
		got := <-received
		assert.True(t, bytes.Equal(payload[:n], got), "received %d bytes", len(got))
	})
	t.Run("short reader", func(t *testing.T) {
		a, b := codecTCPPair(t)
		c := &conn{rw: a, timeout: 5 * time.Second}
		err := c.writePayload(strings.NewReader("abc"), 10)
		require.Error(t, err)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		// What there was went out.
		var got bytes.Buffer
		r := &conn{rw: b, timeout: 5 * time.Second}
		require.NoError(t, r.readPayload(&got, 3))
		assert.Equal(t, "abc", got.String())
	})
	t.Run("empty reader", func(t *testing.T) {
		a, _ := codecTCPPair(t)
		c := &conn{rw: a, timeout: 5 * time.Second}
		require.Error(t, c.writePayload(strings.NewReader(""), 1))
		require.NoError(t, c.writePayload(strings.NewReader(""), 0))
	})
}

// codecTrimNewline removes the one trailing "\n" or "\r\n" that Parse accepts.
func codecTrimNewline(b []byte) []byte {
	if t, ok := bytes.CutSuffix(b, []byte("\n")); ok {
		return bytes.TrimSuffix(t, []byte("\r"))
	}
	return b
}

func FuzzParse(f *testing.F) {
	// The corpus in testdata/fuzz/FuzzParse holds the captured session and
	// malformed messages; these add its terminal-typed variants.
	for _, tc := range goldenSession {
		f.Add([]byte(tc.wire + "\r\n"))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Parse(in, 0)
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) && !errors.Is(err, ErrSizeTooLarge) && !errors.Is(err, ErrMessageTooLong) {
				t.Fatalf("Parse(%q): unexpected error type %T: %v", in, err, err)
			}
			if m != (Message{}) {
				t.Fatalf("Parse(%q) returned %#v with its error", in, m)
			}
			return
		}
		if m.Size < 0 || m.Size > DefaultMaxSize {
			t.Fatalf("Parse(%q): size %d out of [0, %d]", in, m.Size, DefaultMaxSize)
		}
		enc, err := m.AppendText(nil)
		if err != nil {
			t.Fatalf("Parse(%q) = %#v, which AppendText refuses: %v", in, m, err)
		}
		if len(enc) > MaxMessage {
			t.Fatalf("Parse(%q) = %#v encodes to %d bytes", in, m, len(enc))
		}
		if bytes.HasSuffix(enc, []byte("\n")) || bytes.HasSuffix(enc, []byte("\r")) {
			t.Fatalf("Parse(%q) = %#v encodes to %q, with a terminator", in, m, enc)
		}
		again, err := Parse(enc, 0)
		if err != nil {
			t.Fatalf("Parse(%q) = %#v encodes to %q, which Parse refuses: %v", in, m, enc, err)
		}
		if again != m {
			t.Fatalf("Parse(%q) = %#v encodes to %q, which parses as %#v", in, m, enc, again)
		}

		// The encoded form is the input without its newline; only a size
		// written with leading zeros comes back shorter.
		want := codecTrimNewline(in)
		if m.Kind == KindLaboro || m.Kind == KindRezulto {
			i := bytes.LastIndexByte(want, ' ')
			j := bytes.LastIndexByte(enc, ' ')
			if !bytes.Equal(want[:i], enc[:j]) || strings.TrimLeft(string(want[i+1:]), "0") != strings.TrimLeft(string(enc[j+1:]), "0") {
				t.Fatalf("Parse(%q) = %#v encodes to %q", in, m, enc)
			}
			return
		}
		if !bytes.Equal(want, enc) {
			t.Fatalf("Parse(%q) = %#v encodes to %q, want %q", in, m, enc, want)
		}
	})
}

// Two messages read together (the unanswered JES and the first PETO, or
// PRETA and RICEVIS around an empty payload, or lines typed by a person)
// are cut apart; a single message is never cut.
func TestSplit(t *testing.T) {
	tests := []struct{ in, msg, rest string }{
		{"JESPETO", "JES", "PETO"},
		{"JESFINO ANKAU", "JES", "FINO ANKAU"},
		{"PRETAPETO", "PRETA", "PETO"},
		{"PRETAREZULTO a b success 3", "PRETA", "REZULTO a b success 3"},
		{"PRETARICEVIS", "PRETA", "RICEVIS"},
		{"JES\nPETO\n", "JES\n", "PETO\n"},
		{"JES\r\nPETO", "JES\r\n", "PETO"},
		{"FINO ANKAU", "FINO ANKAU", ""},
		{"FINOANKAU", "FINOANKAU", ""},
		{"PETO\n", "PETO\n", ""},
		{"LABORO JES .sh 3", "LABORO JES .sh 3", ""},
		{"ALIGI PETO", "ALIGI PETO", ""},
		{"JESSICA", "JESSICA", ""},
	}
	for _, tt := range tests {
		msg, rest := split([]byte(tt.in))
		assert.Equal(t, tt.msg, string(msg), tt.in)
		assert.Equal(t, tt.rest, string(rest), tt.in)
	}
}
