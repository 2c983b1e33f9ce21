package h2check

import (
	"encoding/binary"
	"io"

	"golang.org/x/net/http2/hpack"
)

// HTTP/2 frame layout (RFC 9113 §4.1) and the frame types and flags the
// inspector looks at.
const (
	frameHeaderLen = 9
	prefaceLen     = 24 // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

	typeData         = 0x0
	typeHeaders      = 0x1
	typeSettings     = 0x4
	typeContinuation = 0x9

	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
	flagAck        = 0x1

	settingLen = 6
	// maxSettings is the most settings in a frame the inspector rewrites;
	// Go's server hangs up on a frame with more than 100.
	maxSettings = 100
)

// malformed is what the inspector hands on in place of a header block that
// opens a stream with a connection-specific field: a DATA frame on stream
// 0, which Go's server answers with GOAWAY(PROTOCOL_ERROR) before closing
// (RFC 9113 §6.1), as §8.2.2 and §5.4.1 allow for a malformed request.
var malformed = [frameHeaderLen]byte{0, 0, 0, typeData, 0, 0, 0, 0, 0}

// inspector reads an HTTP/2 client's byte stream (the connection preface,
// then frames) from src and hands the same bytes on, except for the two
// things Go's server gets wrong by the letter of RFC 9113:
//
//   - a SETTINGS frame naming one setting more than once (§6.5.3 says the
//     values are processed in order; Go's server hangs up) has each
//     earlier occurrence renamed to an unknown setting, which §6.5.2 says
//     to ignore, so that only the last value of each counts, as in-order
//     processing leaves it;
//   - a HEADERS frame opening a stream whose header block holds a
//     connection-specific field (§8.2.2: Connection, Keep-Alive,
//     Proxy-Connection, Transfer-Encoding, Upgrade, or TE other than
//     "trailers"), which Go's server answers with a 400 response, is
//     replaced by a frame Go's server fails the connection for.
//
// Frames longer than maxFrame, and frames of other types, pass through
// without being held: only HEADERS, CONTINUATION and SETTINGS frames are
// read whole before they are handed on. Once the HPACK decoder fails (the
// server fails the connection for the same block), or after a malformed
// block, every later byte passes through unread.
type inspector struct {
	src      io.Reader
	maxFrame uint32

	prefaceLeft int    // bytes of the client preface not yet handed on
	passLeft    uint32 // payload bytes of the current frame to hand on unread

	hdr  [frameHeaderLen]byte
	hdrN int // bytes of hdr read so far
	// frame holds a frame read whole: its header, then its payload as far
	// as read; it grows to the largest frame held and is reused.
	frame []byte

	out []byte // bytes ready to hand on

	dec       *hpack.Decoder
	inBlock   bool   // a request header block continues in CONTINUATION frames
	bad       bool   // the request header block being decoded is malformed
	teFields  int    // TE fields in the block being decoded
	maxStream uint32 // the highest stream a HEADERS frame opened
	done      bool   // stopped inspecting: everything passes through
}

// newInspector returns an inspector of the stream src, for a server that
// reads frames of at most maxFrame bytes and decodes HPACK with a dynamic
// table of at most tableSize bytes and strings of at most maxString bytes.
func newInspector(src io.Reader, maxFrame, tableSize uint32, maxString int) *inspector {
	in := &inspector{src: src, maxFrame: maxFrame, prefaceLeft: prefaceLen}
	in.dec = hpack.NewDecoder(tableSize, in.emit)
	in.dec.SetMaxStringLength(maxString)
	return in
}

// Read hands on the inspected stream. It returns src's errors as they
// come, keeping any partly read frame for the next call, so a read
// deadline that expires mid-frame loses nothing.
func (in *inspector) Read(p []byte) (int, error) {
	for {
		if len(in.out) > 0 {
			n := copy(p, in.out)
			in.out = in.out[n:]
			return n, nil
		}
		if in.prefaceLeft > 0 || in.passLeft > 0 || in.done {
			return in.readThrough(p)
		}
		if err := in.next(); err != nil {
			return 0, err
		}
	}
}

// readThrough reads straight into p: preface bytes, the payload of a frame
// handed on unread, or anything once inspection is done.
func (in *inspector) readThrough(p []byte) (int, error) {
	limit := len(p)
	switch {
	case in.done:
	case in.prefaceLeft > 0:
		limit = min(limit, in.prefaceLeft)
	default:
		limit = min(limit, int(min(in.passLeft, 1<<30)))
	}
	n, err := in.src.Read(p[:limit])
	switch {
	case in.done:
	case in.prefaceLeft > 0:
		in.prefaceLeft -= n
	default:
		in.passLeft -= uint32(n)
	}
	return n, err
}

// next reads the next frame header, and the payload of a frame to inspect,
// and sets out to what to hand on for them.
func (in *inspector) next() error {
	for in.hdrN < frameHeaderLen {
		n, err := in.src.Read(in.hdr[in.hdrN:])
		in.hdrN += n
		if in.hdrN < frameHeaderLen && err != nil {
			return err
		}
	}
	length := uint32(in.hdr[0])<<16 | uint32(in.hdr[1])<<8 | uint32(in.hdr[2])
	if !in.holds(in.hdr[3], in.hdr[4], length) {
		in.hdrN = 0
		in.out = in.hdr[:]
		in.passLeft = length
		return nil
	}
	size := frameHeaderLen + int(length)
	if len(in.frame) == 0 {
		if cap(in.frame) < size {
			in.frame = make([]byte, 0, size)
		}
		in.frame = append(in.frame, in.hdr[:]...)
	}
	for len(in.frame) < size {
		n, err := in.src.Read(in.frame[len(in.frame):size])
		in.frame = in.frame[:len(in.frame)+n]
		if len(in.frame) < size && err != nil {
			return err
		}
	}
	in.hdrN = 0
	in.out = in.inspect(in.frame)
	in.frame = in.frame[:0]
	return nil
}

// holds reports whether a frame of type typ, flags and length is read
// whole and inspected before it is handed on.
func (in *inspector) holds(typ, flags byte, length uint32) bool {
	if length > in.maxFrame {
		return false // the server fails the connection: FRAME_SIZE_ERROR
	}
	switch typ {
	case typeSettings:
		return flags&flagAck == 0 && length%settingLen == 0 && length/settingLen <= maxSettings
	case typeHeaders:
		return true
	case typeContinuation:
		return in.inBlock
	}
	return false
}

// inspect returns the bytes to hand on for frame, a frame read whole,
// which it may rewrite in place. The result stays valid until the next
// frame is read.
func (in *inspector) inspect(frame []byte) []byte {
	switch frame[3] {
	case typeSettings:
		dedupeSettings(frame[frameHeaderLen:])
		return frame
	case typeHeaders:
		return in.headers(frame)
	default: // CONTINUATION of a request header block
		return in.block(frame, frame[frameHeaderLen:])
	}
}

// headers inspects a HEADERS frame: its header block fragment if it opens
// a stream; otherwise (trailers, or a stream the server refuses) it only
// keeps the decoder in step.
func (in *inspector) headers(frame []byte) []byte {
	flags := frame[4]
	stream := binary.BigEndian.Uint32(frame[5:9]) & (1<<31 - 1)
	payload := frame[frameHeaderLen:]
	if flags&flagPadded != 0 {
		if len(payload) < 1 || int(payload[0]) >= len(payload) {
			in.done = true // the server fails the connection: PROTOCOL_ERROR
			return frame
		}
		payload = payload[1 : len(payload)-int(payload[0])]
	}
	if flags&flagPriority != 0 {
		if len(payload) < 5 {
			in.done = true
			return frame
		}
		payload = payload[5:]
	}
	in.inBlock = true
	in.bad = false
	in.teFields = 0
	if stream <= in.maxStream {
		// Trailers: Go's server fails the stream for a connection-specific
		// field in them already. Decode only to stay in step.
		in.teFields = -1
	}
	in.maxStream = max(in.maxStream, stream)
	return in.block(frame, payload)
}

// block decodes one fragment of a header block and returns what to hand
// on: frame, or malformed once the block ends and has proved malformed.
func (in *inspector) block(frame, fragment []byte) []byte {
	if _, err := in.dec.Write(fragment); err != nil {
		in.stop()
		return frame
	}
	if frame[4]&flagEndHeaders == 0 {
		return frame
	}
	in.inBlock = false
	if err := in.dec.Close(); err != nil {
		in.stop()
		return frame
	}
	if in.bad || in.teFields > 1 {
		// The server never reads past this: it fails the connection.
		in.done = true
		return malformed[:]
	}
	return frame
}

// stop ends inspection after the decoder failed: the server's fails on the
// same block and closes the connection.
func (in *inspector) stop() { in.done = true }

// emit checks one decoded field of a block. teFields is -1 in trailers,
// which are decoded but not checked.
func (in *inspector) emit(f hpack.HeaderField) {
	if in.teFields < 0 {
		return
	}
	if connectionSpecific(f.Name) {
		in.bad = true
	}
	if f.Name == "te" {
		in.teFields++
		if f.Value != "trailers" && f.Value != "" {
			in.bad = true
		}
	}
}

// connectionSpecific reports whether name is one of the fields RFC 9113
// §8.2.2 forbids in HTTP/2 (TE aside), in the lower case HTTP/2 requires.
// The list is the one golang.org/x/net/http2 answers 400 for.
func connectionSpecific(name string) bool {
	switch name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// dedupeSettings renames every setting of payload (a SETTINGS frame's
// payload, 6 bytes a setting) that a later one of the same identifier
// overrides to an identifier no other setting of the frame uses and RFC
// 9113 defines none for, so that the receiver ignores it (§6.5.2) and
// sees each identifier once, with its last value.
func dedupeSettings(payload []byte) {
	n := len(payload) / settingLen
	id := func(i int) uint16 { return binary.BigEndian.Uint16(payload[i*settingLen:]) }
	spare := uint16(0xf000) // from the range RFC 9113 leaves to experiments
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if id(i) != id(j) {
				continue
			}
			for used(payload, n, spare) {
				spare++
			}
			binary.BigEndian.PutUint16(payload[i*settingLen:], spare)
			spare++
			break
		}
	}
}

// used reports whether any of the n settings of payload has identifier id.
func used(payload []byte, n int, id uint16) bool {
	for i := 0; i < n; i++ {
		if binary.BigEndian.Uint16(payload[i*settingLen:]) == id {
			return true
		}
	}
	return false
}
