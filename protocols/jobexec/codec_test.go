package jobexec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFramesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	frames := []Frame{
		{FrameLine, []byte("JOB <job_1, ls -l> SUBMITTED")},
		{FrameOutput, bytes.Repeat([]byte{0, 1, 2, 0xff}, OutputChunk/4)},
		{FrameLine, nil},
		{FrameRefusal, []byte("server is shutting down")},
		{FrameExit, ExitPayload(-1)},
	}
	for _, f := range frames {
		require.NoError(t, WriteFrame(&buf, f.Type, f.Payload))
	}
	for _, want := range frames {
		got, err := ReadFrame(&buf, 0)
		require.NoError(t, err)
		assert.Equal(t, want.Type, got.Type)
		assert.Equal(t, len(want.Payload), len(got.Payload))
		assert.True(t, bytes.Equal(want.Payload, got.Payload))
	}
	_, err := ReadFrame(&buf, 0)
	assert.ErrorIs(t, err, io.EOF, "a stream that ends between frames")
}

func TestReadFrameRefusesBadInput(t *testing.T) {
	header := func(n uint32, typ byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, n), typ)
	}
	tests := []struct {
		name  string
		input []byte
		check func(t *testing.T, err error)
	}{
		{"4 GiB claimed", header(0xffffffff, 'Q'), func(t *testing.T, err error) { assert.ErrorIs(t, err, ErrFrameTooLarge) }},
		{"just above the limit", header(1025, 'L'), func(t *testing.T, err error) { assert.ErrorIs(t, err, ErrFrameTooLarge) }},
		{"unknown type", header(3, 'Z'), func(t *testing.T, err error) {
			var pe *ProtocolError
			assert.ErrorAs(t, err, &pe)
		}},
		{"half a header", []byte{0, 0}, func(t *testing.T, err error) { assert.ErrorIs(t, err, io.ErrUnexpectedEOF) }},
		{"half a payload", append(header(10, 'L'), "abc"...), func(t *testing.T, err error) { assert.ErrorIs(t, err, io.ErrUnexpectedEOF) }},
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n"), func(t *testing.T, err error) { assert.Error(t, err) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tt.input), 1024)
			tt.check(t, err)
		})
	}
}

// A frame claiming 4 GiB costs nothing: the length is refused before any
// allocation of that size.
func TestHugeLengthAllocatesNothing(t *testing.T) {
	input := append(binary.BigEndian.AppendUint32(nil, 0xffffffff), 'Q')
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		_, err := ReadFrame(bytes.NewReader(input), 0)
		require.ErrorIs(t, err, ErrFrameTooLarge)
	}
	runtime.ReadMemStats(&after)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20))
}

func TestWriteFrameRefusesOversizedPayload(t *testing.T) {
	err := WriteFrame(io.Discard, FrameOutput, make([]byte, DefaultMaxFrame+1))
	assert.ErrorIs(t, err, ErrFrameTooLarge)
}

func TestRequestRoundTrip(t *testing.T) {
	tests := []Request{
		{Version: Version, Command: "poll"},
		{Version: Version, Token: "s3cret", Command: "issueJob", Args: []string{"sh", "-c", `echo "a   b"`}},
		{Version: Version, Command: "issueJob", Args: []string{"grep", "two words", "", "ünïcödé", "x\x00y"}},
		{Version: MinVersion, Command: "setConcurrency", Args: []string{"4"}},
	}
	for _, q := range tests {
		p, err := q.AppendBinary(nil)
		require.NoError(t, err)
		assert.Equal(t, byte(q.Version), p[0])
		got, err := ParseRequest(p)
		require.NoError(t, err)
		assert.Equal(t, q, got)
	}
	p, err := Request{Command: "poll"}.AppendBinary(nil)
	require.NoError(t, err)
	assert.Equal(t, byte(Version), p[0], "version 0 means the newest")
	_, err = Request{Version: Version + 1, Command: "poll"}.AppendBinary(nil)
	assert.Error(t, err)
}

// The bytes of a version 1 request, as commanders from before the
// acknowledgement send them, still decode.
func TestParseRequestVersion1(t *testing.T) {
	p := []byte{1, 3, 0, 4, 's', 't', 'o', 'p', 5, 'j', 'o', 'b', '_', '1'}
	q, err := ParseRequest(p)
	require.NoError(t, err)
	assert.Equal(t, Request{Version: 1, Command: "stop", Args: []string{"job_1"}}, q)
	assert.False(t, wantsAck(p))
	p[0] = 2
	assert.True(t, wantsAck(p))
}

func TestParseRequestRefusesMalformedInput(t *testing.T) {
	good, err := Request{Command: "poll", Args: []string{"x"}}.AppendBinary(nil)
	require.NoError(t, err)
	tests := map[string][]byte{
		"empty":               {},
		"version 0":           append([]byte{0}, good[1:]...),
		"version too new":     append([]byte{Version + 1}, good[1:]...),
		"count beyond data":   binary.AppendUvarint([]byte{Version}, 1<<40),
		"count below two":     {Version, 1, 0},
		"length beyond data":  append(binary.AppendUvarint([]byte{Version, 2}, 1<<40), 'x'),
		"trailing bytes":      append(append([]byte(nil), good...), 'x'),
		"truncated string":    good[:len(good)-1],
		"overflowing uvarint": append([]byte{Version}, bytes.Repeat([]byte{0xff}, 11)...),
	}
	for name, input := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRequest(input)
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
		})
	}
	_, err = Request{Command: "issueJob", Args: make([]string, MaxRequestStrings)}.AppendBinary(nil)
	assert.Error(t, err)
}

func TestExitPayload(t *testing.T) {
	for _, code := range []int{0, 1, 127, -1, 255} {
		got, err := ParseExit(ExitPayload(code))
		require.NoError(t, err)
		assert.Equal(t, code, got)
	}
	_, err := ParseExit([]byte{1, 2})
	assert.Error(t, err)
}

// FuzzParseExit: only 4 bytes decode, and they re-encode to the same
// payload.
func FuzzParseExit(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzParseExit.
	f.Add(ExitPayload(-1))
	f.Fuzz(func(t *testing.T, p []byte) {
		code, err := ParseExit(p)
		if len(p) != 4 {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		require.Equal(t, p, ExitPayload(code))
	})
}

// FuzzParseRequest: whatever decodes re-encodes to a payload that decodes
// to the same request.
func FuzzParseRequest(f *testing.F) {
	for _, q := range []Request{
		{Command: "poll"},
		{Token: "t", Command: "issueJob", Args: []string{"sh", "-c", "echo 'a   b'"}},
	} {
		p, _ := q.AppendBinary(nil)
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		q, err := ParseRequest(p)
		if err != nil {
			return
		}
		again, err := q.AppendBinary(nil)
		require.NoError(t, err)
		q2, err := ParseRequest(again)
		require.NoError(t, err)
		require.Equal(t, q, q2)
	})
}

// FuzzReadFrame: any byte stream gives frames or an error, never a panic or
// a payload above the limit, and what is read re-encodes to the same bytes.
func FuzzReadFrame(f *testing.F) {
	var seed bytes.Buffer
	WriteFrame(&seed, FrameLine, []byte("CONCURRENCY SET AT 2"))
	WriteFrame(&seed, FrameExit, ExitPayload(0))
	f.Add(seed.Bytes())
	f.Add([]byte(strings.Repeat("\xff", 9)))
	f.Fuzz(func(t *testing.T, input []byte) {
		r := bytes.NewReader(input)
		var out bytes.Buffer
		for {
			fr, err := ReadFrame(r, 4096)
			if err != nil {
				if errors.Is(err, io.EOF) {
					require.True(t, bytes.Equal(input[:len(input)-r.Len()], out.Bytes()))
				}
				return
			}
			require.LessOrEqual(t, len(fr.Payload), 4096)
			require.NoError(t, WriteFrame(&out, fr.Type, fr.Payload))
		}
	})
}

// FuzzParseHello: whatever decodes re-encodes to the same payload.
func FuzzParseHello(f *testing.F) {
	f.Add(HelloPayload(Version, bytes.Repeat([]byte{7}, NonceSize)))
	f.Add([]byte{Version})
	f.Fuzz(func(t *testing.T, p []byte) {
		v, nonce, err := ParseHello(p)
		if err != nil {
			return
		}
		require.Len(t, nonce, NonceSize)
		require.Equal(t, p, HelloPayload(v, nonce))
	})
}

// FuzzParseChallenge: whatever decodes re-encodes to the same payload.
func FuzzParseChallenge(f *testing.F) {
	nonce := bytes.Repeat([]byte{7}, NonceSize)
	f.Add(ChallengePayload(nonce, ServerProof("s3cret", nonce, nonce)))
	f.Add(nonce)
	f.Fuzz(func(t *testing.T, p []byte) {
		nonce, proof, err := ParseChallenge(p)
		if err != nil {
			return
		}
		require.Len(t, nonce, NonceSize)
		require.Equal(t, p, ChallengePayload(nonce, proof))
	})
}

// A proof holds for its token, nonces and command, and for nothing else.
func TestProof(t *testing.T) {
	c, s := bytes.Repeat([]byte{1}, NonceSize), bytes.Repeat([]byte{2}, NonceSize)
	q, err := Request{Command: "issueJob", Args: []string{"echo", "a"}}.Prove("s3cret", c, s)
	require.NoError(t, err)
	assert.Equal(t, Version, q.Version)
	assert.Len(t, q.Token, 32)
	assert.True(t, q.Proven("s3cret", c, s))
	assert.False(t, q.Proven("s3cret!", c, s), "another token")
	assert.False(t, q.Proven("s3cret", s, c), "the nonces swapped")
	changed := q
	changed.Args = []string{"echo", "b"}
	assert.False(t, changed.Proven("s3cret", c, s), "another argument")
	assert.NotEqual(t, ServerProof("s3cret", c, s), []byte(q.Token), "a server's proof is not a commander's")
}
