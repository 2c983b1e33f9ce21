package h2check

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const preface = http2.ClientPreface

// stream builds a client's byte stream: the preface, then frames written
// with x/net's Framer and header blocks with its HPACK encoder.
type stream struct {
	buf bytes.Buffer
	fr  *http2.Framer
	hb  bytes.Buffer
	enc *hpack.Encoder
}

func newStream() *stream {
	s := &stream{}
	s.buf.WriteString(preface)
	s.fr = http2.NewFramer(&s.buf, nil)
	s.enc = hpack.NewEncoder(&s.hb)
	return s
}

// block HPACK-encodes fields (name, value pairs).
func (s *stream) block(fields ...string) []byte {
	s.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = s.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(s.hb.Bytes())
}

func (s *stream) request(t *testing.T, id uint32, fields ...string) {
	t.Helper()
	head := append([]string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x"}, fields...)
	if err := s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: s.block(head...), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// inspectAll runs b through an inspector whose source hands it on one byte
// a read, and returns what the inspector hands on.
func inspectAll(t testing.TB, b []byte) []byte {
	t.Helper()
	in := newInspector(iotest.OneByteReader(bytes.NewReader(b)), MaxFrameSize, defaultTableSize, maxHeaderString)
	out, err := io.ReadAll(in)
	if err != nil {
		t.Fatalf("reading through the inspector: %v", err)
	}
	return out
}

// frames reads the frames of b after the preface, as Go's server would.
func frames(t *testing.T, b []byte) []http2.Frame {
	t.Helper()
	if !bytes.HasPrefix(b, []byte(preface)) {
		t.Fatalf("stream does not start with the preface: %q", b[:min(len(b), 24)])
	}
	fr := http2.NewFramer(nil, bytes.NewReader(b[len(preface):]))
	fr.MaxHeaderListSize = 1 << 20
	fr.ReadMetaHeaders = hpack.NewDecoder(defaultTableSize, nil)
	var fs []http2.Frame
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			return fs
		}
		if err != nil {
			fs = append(fs, nil) // an error frame: the server fails the connection here
			return fs
		}
		fs = append(fs, f)
	}
}

func TestInspectorPassesValidRequestsUnchanged(t *testing.T) {
	s := newStream()
	_ = s.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14})
	_ = s.fr.WriteSettingsAck()
	s.request(t, 1, "te", "trailers", "user-agent", "test")
	s.request(t, 3, "te", "", "accept", "*/*")
	_ = s.fr.WriteData(3, true, bytes.Repeat([]byte("d"), 20000)) // above MaxFrameSize: not held
	_ = s.fr.WriteWindowUpdate(0, 100)
	_ = s.fr.WritePing(false, [8]byte{1})
	// Trailers with a connection-specific field: Go's server fails the
	// stream for them itself; the inspector hands them on.
	_ = s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: s.block("connection", "close"), EndStream: true, EndHeaders: true})
	in := s.buf.Bytes()
	if out := inspectAll(t, in); !bytes.Equal(out, in) {
		t.Fatalf("the inspector changed a valid stream (%d bytes in, %d out)", len(in), len(out))
	}
}

func TestInspectorFailsConnectionSpecificFields(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields []string
	}{
		{"connection", []string{"connection", "keep-alive"}},
		{"keep-alive", []string{"keep-alive", "timeout=5"}},
		{"proxy-connection", []string{"proxy-connection", "close"}},
		{"transfer-encoding", []string{"transfer-encoding", "chunked"}},
		{"upgrade", []string{"upgrade", "websocket"}},
		{"te gzip", []string{"te", "gzip"}},
		{"te twice", []string{"te", "trailers", "te", "trailers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream()
			_ = s.fr.WriteSettings()
			s.request(t, 1)
			before := s.buf.Len()
			s.request(t, 3, tc.fields...)
			s.request(t, 5)
			out := inspectAll(t, s.buf.Bytes())
			want := append(bytes.Clone(s.buf.Bytes()[:before]), malformed[:]...)
			if !bytes.HasPrefix(out, want) {
				t.Fatalf("the malformed request's frame was not replaced by a DATA frame on stream 0")
			}
			fs := frames(t, out)
			if last := fs[len(fs)-1]; last != nil {
				t.Fatalf("Go's framer reads the replacement as %v; want a connection error", last)
			}
		})
	}
}

func TestInspectorFailsMalformedBlockAcrossContinuation(t *testing.T) {
	s := newStream()
	_ = s.fr.WriteSettings()
	block := s.block(":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x", "upgrade", "h2c")
	before := s.buf.Len()
	_ = s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:5], Priority: http2.PriorityParam{Weight: 7}, PadLength: 3})
	_ = s.fr.WriteContinuation(1, false, block[5:9])
	_ = s.fr.WriteContinuation(1, true, block[9:])
	out := inspectAll(t, s.buf.Bytes())
	// The HEADERS frame and the first CONTINUATION pass; the last one,
	// which ends the block, is replaced.
	headersLen := len(s.buf.Bytes()) - before - (frameHeaderLen + len(block[9:]))
	if !bytes.Equal(out[:before+headersLen], s.buf.Bytes()[:before+headersLen]) ||
		!bytes.Equal(out[before+headersLen:], malformed[:]) {
		t.Fatalf("block across CONTINUATION frames: got % x", out[before:])
	}
}

func TestInspectorDedupesSettings(t *testing.T) {
	s := newStream()
	_ = s.fr.WriteSettings(
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100},
		http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1},
		http2.Setting{ID: 0xf000, Val: 9}, // an unknown one the client sent: not reused
		http2.Setting{ID: http2.SettingHeaderTableSize, Val: 4096},
	)
	out := inspectAll(t, s.buf.Bytes())
	if len(out) != s.buf.Len() {
		t.Fatalf("length changed: %d to %d", s.buf.Len(), len(out))
	}
	fs := frames(t, out)
	sf, ok := fs[0].(*http2.SettingsFrame)
	if !ok || sf.HasDuplicates() {
		t.Fatalf("settings frame after the inspector: %v", fs[0])
	}
	got := map[http2.SettingID]uint32{}
	_ = sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
	want := map[http2.SettingID]uint32{http2.SettingInitialWindowSize: 1, http2.SettingHeaderTableSize: 4096, 0xf000: 9, 0xf001: 100, 0xf002: 0}
	if len(got) != len(want) {
		t.Fatalf("settings %v; want %v", got, want)
	}
	for id, v := range want {
		if got[id] != v {
			t.Fatalf("settings %v; want %v", got, want)
		}
	}
}

// TestInspectorKeepsPartialFrameOnError reads through a source that fails
// with a timeout every other read: nothing is lost or repeated.
func TestInspectorKeepsPartialFrameOnError(t *testing.T) {
	s := newStream()
	_ = s.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 5}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 6})
	s.request(t, 1, "accept", "*/*")
	_ = s.fr.WriteData(1, true, []byte("body"))
	in := newInspector(iotest.TimeoutReader(iotest.OneByteReader(bytes.NewReader(s.buf.Bytes()))), MaxFrameSize, defaultTableSize, maxHeaderString)
	var out []byte
	buf := make([]byte, 7)
	for range 10000 {
		n, err := in.Read(buf)
		out = append(out, buf[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
	}
	want := inspectAll(t, s.buf.Bytes())
	if !bytes.Equal(out, want) {
		t.Fatalf("reads with timeouts between them handed on %d bytes, want %d", len(out), len(want))
	}
}

// FuzzInspector checks, for any client stream, that the inspector never
// panics, hands on the same bytes however its source splits them, and
// changes nothing but SETTINGS identifiers or the tail from a malformed
// block on.
// ci:fuzztime 100000x
func FuzzInspector(f *testing.F) {
	s := newStream()
	_ = s.fr.WriteSettings(http2.Setting{ID: 4, Val: 1}, http2.Setting{ID: 4, Val: 2})
	s.request(&testing.T{}, 1, "te", "trailers")
	f.Add(s.buf.Bytes()[len(preface):])
	s.request(&testing.T{}, 3, "connection", "close")
	f.Add(s.buf.Bytes()[len(preface):])
	f.Add([]byte{0, 0, 5, 1, 0x2c, 0, 0, 0, 1, 4, 0x82, 0x86, 0x84, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(preface), b...)
		whole, err := io.ReadAll(newInspector(bytes.NewReader(in), MaxFrameSize, defaultTableSize, maxHeaderString))
		if err != nil {
			t.Fatal(err)
		}
		if bytewise := inspectAll(t, in); !bytes.Equal(whole, bytewise) {
			t.Fatalf("reads of one byte handed on %x, whole reads %x", bytewise, whole)
		}
		checkChanges(t, in, whole)
	})
}

// checkChanges fails t unless out is in, a client stream, with nothing
// changed but the identifiers of SETTINGS frames, or with one HEADERS or
// CONTINUATION frame replaced by malformed, or a frame cut short by the end
// of in left out.
func checkChanges(t *testing.T, in, out []byte) {
	if !bytes.HasPrefix(out, in[:len(preface)]) {
		t.Fatal("preface changed")
	}
	i, o := len(preface), len(preface)
	for i < len(in) {
		end := len(in)
		if i+frameHeaderLen <= len(in) {
			end = min(len(in), i+frameHeaderLen+(int(in[i])<<16|int(in[i+1])<<8|int(in[i+2])))
			typ := in[i+3]
			if (typ == typeHeaders || typ == typeContinuation) && bytes.HasPrefix(out[o:], malformed[:]) {
				if !bytes.Equal(out[o+frameHeaderLen:], in[end:]) {
					t.Fatal("bytes after a replaced frame changed")
				}
				return
			}
		}
		if o == len(out) && (i+frameHeaderLen > len(in) || end-i < frameHeaderLen+(int(in[i])<<16|int(in[i+1])<<8|int(in[i+2]))) {
			return // a frame cut short by the end of the stream: not handed on
		}
		if len(out) < o+end-i {
			t.Fatalf("handed on %d bytes of %d", len(out), len(in))
		}
		for k := i; k < end; k++ {
			inID := k >= i+frameHeaderLen && in[i+3] == typeSettings && (k-i-frameHeaderLen)%settingLen < 2
			if out[o+k-i] != in[k] && !inID {
				t.Fatalf("byte %d changed outside a SETTINGS identifier", k)
			}
		}
		o += end - i
		i = end
	}
	if o != len(out) {
		t.Fatalf("handed on %d bytes of %d", len(out), len(in))
	}
}

func TestDedupeSettingsNeverRepeatsAnIdentifier(t *testing.T) {
	p := make([]byte, 0, 10*settingLen)
	for _, id := range []uint16{4, 4, 0xf000, 4, 0xf001, 4, 0xf003, 1, 1} {
		p = binary.BigEndian.AppendUint16(p, id)
		p = binary.BigEndian.AppendUint32(p, uint32(id))
	}
	dedupeSettings(p)
	seen := map[uint16]bool{}
	for i := 0; i < len(p); i += settingLen {
		id := binary.BigEndian.Uint16(p[i:])
		if seen[id] {
			t.Fatalf("identifier %#x twice after dedupe: % x", id, p)
		}
		seen[id] = true
	}
	if got := binary.BigEndian.Uint16(p[5*settingLen:]); got != 4 {
		t.Fatalf("the last SETTINGS_INITIAL_WINDOW_SIZE was renamed to %#x", got)
	}
}
