package http1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// bufferBeforeChunkingSize is how much of a body the server holds before
// it must send the head without knowing the body's length: a handler that
// writes less before returning gets a Content-Length, one that writes more
// (or flushes) a chunked body. It is net/http's figure, so that both
// servers frame the same handler's output alike.
const bufferBeforeChunkingSize = 2048

// response is the http.ResponseWriter of a connection, reused for each of
// its requests. Its behaviour follows net/http's response and chunkWriter
// (status line, which headers are added or dropped, Content-Length versus
// chunked, keep-alive), with one difference in how: the handler's header
// map is written out (sorted, as net/http sorts it) when the handler calls
// WriteHeader, instead of being cloned, so a response costs no map.
type response struct {
	c    *conn
	req  *http.Request
	body *body // nil when the request has none

	header      http.Header // the handler's, cleared for each request
	status      int
	wroteHeader bool // logically: WriteHeader was called (not 1xx)

	contentLength   int64 // declared by the handler, or -1
	written         int64
	closeAfterReply bool
	fullDuplex      bool
	bodyLimitHit    bool
	handlerDone     atomic.Bool
	wantsClose      bool
	wants10KA       bool
	isHEAD          bool
	is11            bool

	// The header as it was at WriteHeader.
	snap snapshot

	// What net/http's chunkWriter holds.
	cwWroteHeader bool
	chunking      bool
	trailers      []string // declared trailer names

	ww *bufio.Writer // the 2 KiB buffer before chunking, over cw
	cw chunkWriter

	writeContinueMu  sync.Mutex
	canWriteContinue atomic.Bool

	keys    []string          // sorting scratch
	fields  []httpfield.Field // sorting scratch of WriteHeaderFields
	clenBuf [20]byte
	hexBuf  [18]byte
	dateBuf [len(http.TimeFormat)]byte
}

// snapshot is the handler's header serialized at WriteHeader time, sorted
// by name with trailer-prefixed names left out, and what the head's final
// form depends on.
type snapshot struct {
	buf []byte
	// Where the lines of names the head may drop are in buf.
	cl, te, conn, ct span
	del              [4]bool // cl, te, conn, ct dropped

	hasCL, hasTE, hasConn, hasCT, hasDate, hasCE bool
	clValue, teValue, connValue                  string // first values
	trailerPrefix                                bool   // a "Trailer:" name was set
	trailerDecl                                  bool   // a Trailer header has values
	switches                                     bool   // Upgrade set and Connection names it
}

const (
	delCL = iota
	delTE
	delConn
	delCT
)

// reset prepares the response for a new request.
func (w *response) reset(req *http.Request, b *body, wantsClose, wants10KA bool) {
	w.req = req
	w.body = b
	clear(w.header)
	w.status = 0
	w.wroteHeader = false
	w.contentLength = -1
	w.written = 0
	w.closeAfterReply = false
	w.fullDuplex = false
	w.bodyLimitHit = false
	w.handlerDone.Store(false)
	w.wantsClose = wantsClose
	w.wants10KA = wants10KA
	w.isHEAD = req.Method == "HEAD"
	w.is11 = req.ProtoAtLeast(1, 1)
	w.snap = snapshot{buf: w.snap.buf[:0]}
	w.cwWroteHeader = false
	w.chunking = false
	w.trailers = w.trailers[:0]
	w.canWriteContinue.Store(false)
	w.ww.Reset(&w.cw)
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if !w.headerWritable(code) {
		return
	}
	checkWriteHeaderCode(code)
	if code < 101 || code > 199 {
		w.disableWriteContinue()
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// Informational: sent at once, with the header as it is now
		// (RFC 8297), minus the framing fields.
		bw := w.c.bufw
		writeStatusLine(bw, w.is11, code)
		w.writeHeaderLines(bw, true)
		_, _ = bw.WriteString("\r\n")
		_ = bw.Flush()
		return
	}
	w.wroteHeader = true
	w.status = code
	w.takeSnapshot(nil)
	w.readContentLength()
}

// WriteHeaderFields writes the head of a final response as WriteHeader(code)
// would after each of fields had been added to the header (Header().Add,
// in order), without putting them in the header map: a proxy passes an
// upstream's header on so without building a map for it. The fields'
// names must be in canonical form. They are not in Header() afterwards.
// For an informational status, or when the header or the fields declare
// trailers (whose values the server reads from the header map once the
// handler returns), the fields are added to the map and WriteHeader is
// called.
func (w *response) WriteHeaderFields(code int, fields []httpfield.Field) {
	if code < 200 || w.declaresTrailers(fields) {
		for _, f := range fields {
			w.header[f.Name] = append(w.header[f.Name], f.Value)
		}
		w.WriteHeader(code)
		return
	}
	if !w.headerWritable(code) {
		return
	}
	checkWriteHeaderCode(code)
	w.disableWriteContinue()
	w.wroteHeader = true
	w.status = code
	w.takeSnapshot(fields)
	w.readContentLength()
}

// headerWritable reports whether a head may still be written: not on a
// hijacked connection, not twice (both logged, as net/http logs them).
func (w *response) headerWritable(code int) bool {
	if w.c.hijackedFast() {
		w.c.srv.logger().Debug("http1: WriteHeader on a hijacked connection")
		return false
	}
	if w.wroteHeader {
		w.c.srv.logger().Debug("http1: superfluous WriteHeader call", "code", code)
		return false
	}
	return true
}

// declaresTrailers reports whether the header or fields name trailers:
// a Trailer field, or a name with http.TrailerPrefix.
func (w *response) declaresTrailers(fields []httpfield.Field) bool {
	if _, ok := w.header["Trailer"]; ok {
		return true
	}
	for _, f := range fields {
		if f.Name == "Trailer" || strings.HasPrefix(f.Name, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// readContentLength takes the Content-Length of the header as written,
// dropping it from the header when it is not a valid length.
func (w *response) readContentLength() {
	if w.snap.hasCL && w.snap.clValue != "" {
		v, err := strconv.ParseInt(w.snap.clValue, 10, 64)
		if err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.c.srv.logger().Debug("http1: invalid Content-Length", "value", w.snap.clValue)
			w.header.Del("Content-Length")
		}
	}
}

func checkWriteHeaderCode(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
}

// takeSnapshot serializes the handler's header into w.snap, merged with
// fields (see WriteHeaderFields) as if they had been added to it: the
// names sorted, and under each name the header's values, then the fields'.
func (w *response) takeSnapshot(fields []httpfield.Field) {
	s := &w.snap
	keys := w.keys[:0]
	for k := range w.header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.keys = keys[:0]
	fs := w.sortFields(fields)
	buf := s.buf[:0]
	for i, j := 0, 0; i < len(keys) || j < len(fs); {
		var k string
		var vv []string
		if j == len(fs) || i < len(keys) && keys[i] <= fs[j].Name {
			k, vv = keys[i], w.header[keys[i]]
			i++
		} else {
			k = fs[j].Name
		}
		j0 := j
		for j < len(fs) && fs[j].Name == k {
			j++
		}
		buf = w.snapshotName(buf, k, vv, fs[j0:j])
	}
	s.buf = buf
	upgrade := firstValue(w.header["Upgrade"], fieldsNamed(fs, "Upgrade"))
	s.switches = upgrade != "" && (httpguts.HeaderValuesContainsToken(w.header["Connection"], "Upgrade") ||
		fieldsContainToken(fieldsNamed(fs, "Connection"), "Upgrade"))
	clear(fs) // serialized: the connection keeps no upstream's strings
}

// snapshotName appends to buf the lines of the name k, whose values are
// vv and then those of fs, and notes in w.snap what the head's final form
// depends on.
func (w *response) snapshotName(buf []byte, k string, vv []string, fs []httpfield.Field) []byte {
	s := &w.snap
	if strings.HasPrefix(k, http.TrailerPrefix) {
		s.trailerPrefix = true
		return buf
	}
	start := len(buf)
	buf = appendHeaderLines(buf, k, vv)
	buf = appendFieldLines(buf, k, fs)
	sp := span{start, len(buf)}
	v0 := firstValue(vv, fs)
	switch k {
	case "Content-Length":
		s.hasCL, s.cl, s.clValue = true, sp, v0
	case "Transfer-Encoding":
		s.hasTE, s.te, s.teValue = true, sp, v0
	case "Connection":
		s.hasConn, s.conn, s.connValue = true, sp, v0
	case "Content-Type":
		s.hasCT, s.ct = true, sp
	case "Date":
		s.hasDate = true
	case "Content-Encoding":
		s.hasCE = v0 != ""
	case "Trailer":
		s.trailerDecl = s.trailerDecl || len(vv)+len(fs) > 0
		for _, v := range vv {
			forEachElement(v, w.declareTrailer)
		}
		for _, f := range fs {
			forEachElement(f.Value, w.declareTrailer)
		}
	}
	return buf
}

// sortFields returns fields sorted by name, those of one name in the order
// given, in a slice of the response's own.
func (w *response) sortFields(fields []httpfield.Field) []httpfield.Field {
	if len(fields) == 0 {
		return nil
	}
	fs := append(w.fields[:0], fields...)
	w.fields = fs
	// Insertion sort: stable, and a response has a few fields.
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].Name < fs[j-1].Name; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
	return fs
}

// firstValue returns the first of the values vv and then those of fs.
func firstValue(vv []string, fs []httpfield.Field) string {
	switch {
	case len(vv) > 0:
		return vv[0]
	case len(fs) > 0:
		return fs[0].Value
	}
	return ""
}

// fieldsNamed returns the run of fs, sorted by name, named k.
func fieldsNamed(fs []httpfield.Field, k string) []httpfield.Field {
	i, _ := slices.BinarySearchFunc(fs, k, func(f httpfield.Field, k string) int { return strings.Compare(f.Name, k) })
	j := i
	for j < len(fs) && fs[j].Name == k {
		j++
	}
	return fs[i:j]
}

// fieldsContainToken reports whether a value of fs has token in its
// comma-separated list, as httpguts.HeaderValuesContainsToken does.
func fieldsContainToken(fs []httpfield.Field, token string) bool {
	for _, f := range fs {
		if httpguts.HeaderValuesContainsToken([]string{f.Value}, token) {
			return true
		}
	}
	return false
}

// appendHeaderLines appends "k: v\r\n" for each value, as Header.Write
// does: names that are not tokens are dropped, CR and LF in values become
// spaces and values are trimmed.
func appendHeaderLines(buf []byte, k string, vv []string) []byte {
	if len(vv) == 0 || !httpguts.ValidHeaderFieldName(k) {
		return buf
	}
	for _, v := range vv {
		buf = appendHeaderLine(buf, k, v)
	}
	return buf
}

// appendFieldLines is appendHeaderLines for the values of fields, all
// named k.
func appendFieldLines(buf []byte, k string, fs []httpfield.Field) []byte {
	if len(fs) == 0 || !httpguts.ValidHeaderFieldName(k) {
		return buf
	}
	for _, f := range fs {
		buf = appendHeaderLine(buf, k, f.Value)
	}
	return buf
}

func appendHeaderLine(buf []byte, k, v string) []byte {
	v = cleanValue(v)
	buf = append(buf, k...)
	buf = append(buf, ": "...)
	buf = append(buf, v...)
	return append(buf, "\r\n"...)
}

var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

func cleanValue(v string) string {
	if v == "" {
		return v
	}
	if c := v[0]; c == ' ' || c == '\t' || c == '\r' || c == '\n' {
		return textproto.TrimString(headerNewlineToSpace.Replace(v))
	}
	if c := v[len(v)-1]; c == ' ' || c == '\t' || c == '\r' || c == '\n' {
		return textproto.TrimString(headerNewlineToSpace.Replace(v))
	}
	if strings.ContainsAny(v, "\r\n") {
		return textproto.TrimString(headerNewlineToSpace.Replace(v))
	}
	return v
}

// writeHeaderLines writes the handler's current header sorted, for a 1xx
// response; framing fields are left out when noFraming.
func (w *response) writeHeaderLines(bw *bufio.Writer, noFraming bool) {
	w.writeLinesOf(bw, w.header, noFraming)
}

// writeLinesOf writes h sorted, as writeHeaderLines writes the handler's
// header, with w's scratch space.
func (w *response) writeLinesOf(bw *bufio.Writer, h http.Header, noFraming bool) {
	keys := w.keys[:0]
	for k := range h {
		if noFraming && (k == "Content-Length" || k == "Transfer-Encoding") {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.keys = keys[:0]
	buf := w.snap.buf[:0]
	for _, k := range keys {
		buf = appendHeaderLines(buf, k, h[k])
	}
	_, _ = bw.Write(buf)
	w.snap.buf = buf[:0]
}

func (w *response) declareTrailer(k string) {
	k = http.CanonicalHeaderKey(k)
	if !httpguts.ValidTrailerHeader(k) {
		return
	}
	w.trailers = append(w.trailers, k)
}

func (w *response) disableWriteContinue() {
	w.writeContinueMu.Lock()
	w.canWriteContinue.Store(false)
	w.writeContinueMu.Unlock()
}

func (w *response) Write(p []byte) (int, error) { return w.write(len(p), p, "") }

func (w *response) WriteString(s string) (int, error) { return w.write(len(s), nil, s) }

func (w *response) write(n int, b []byte, s string) (int, error) {
	if w.c.hijackedFast() {
		if n > 0 {
			w.c.srv.logger().Debug("http1: Write on a hijacked connection")
		}
		return 0, http.ErrHijacked
	}
	if w.canWriteContinue.Load() {
		w.disableWriteContinue()
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if n == 0 {
		return 0, nil
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(n)
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if b != nil {
		return w.ww.Write(b)
	}
	return w.ww.WriteString(s)
}

// chunkWriter receives what the 2 KiB buffer lets through: it writes the
// head before the first of it, then the body, chunked if so decided.
type chunkWriter struct{ w *response }

func (cw *chunkWriter) Write(p []byte) (int, error) {
	w := cw.w
	if !w.cwWroteHeader {
		w.writeHead(p)
	}
	if w.isHEAD {
		return len(p), nil
	}
	bw := w.c.bufw
	if w.chunking {
		_, _ = bw.Write(strconv.AppendUint(w.hexBuf[:0], uint64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if w.chunking && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		_ = w.c.rwc.Close()
	}
	return n, err
}

func (cw *chunkWriter) flush() error {
	w := cw.w
	if !w.cwWroteHeader {
		w.writeHead(nil)
	}
	return w.c.bufw.Flush()
}

func (cw *chunkWriter) close() {
	w := cw.w
	if !w.cwWroteHeader {
		w.writeHead(nil)
	}
	if !w.chunking {
		return
	}
	bw := w.c.bufw
	_, _ = bw.WriteString("0\r\n")
	if t := w.finalTrailers(); t != nil {
		_ = t.Write(bw)
	}
	_, _ = bw.WriteString("\r\n")
}

// finalTrailers collects the trailers the handler set: "Trailer:"-prefixed
// names, and the values of the names declared in the Trailer header.
func (w *response) finalTrailers() http.Header {
	var t http.Header
	for k, vv := range w.header {
		if kk, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = make(http.Header)
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		if t == nil {
			t = make(http.Header)
		}
		for _, v := range w.header[k] {
			t.Add(k, v)
		}
	}
	return t
}

// writeHead decides and writes the response head into the connection's
// buffer; p is the first part of the body (sniffed for a Content-Type,
// and its length is the Content-Length when the handler has finished).
// Its decisions are net/http's chunkWriter.writeHeader's, step by step.
func (w *response) writeHead(p []byte) {
	if w.cwWroteHeader {
		return
	}
	w.cwWroteHeader = true
	s := &w.snap
	keepAlives := !w.c.srv.shuttingDown()
	trailers := s.trailerPrefix || s.trailerDecl
	hasTE := s.teValue != "" && !s.del[delTE]
	te := s.teValue

	var setCL []byte
	var setCT, setConn, setTE string
	if w.handlerDone.Load() && !trailers && !hasTE && bodyAllowedForStatus(w.status) && !w.has(delCL) && (!w.isHEAD || len(p) > 0) {
		w.contentLength = int64(len(p))
		setCL = strconv.AppendInt(w.clenBuf[:0], int64(len(p)), 10)
	}
	if w.wants10KA && keepAlives {
		sentLength := w.get(delCL) != ""
		if sentLength && w.get(delConn) == "keep-alive" {
			w.closeAfterReply = false
		}
	}
	hasCL := w.contentLength != -1
	if w.wants10KA && (w.isHEAD || hasCL || !bodyAllowedForStatus(w.status)) {
		if !w.has(delConn) {
			setConn = "keep-alive"
		}
	} else if !w.is11 || w.wantsClose {
		w.closeAfterReply = true
	}
	if w.get(delConn) == "close" || !keepAlives {
		w.closeAfterReply = true
	}
	if w.body != nil && w.body.expect && !w.body.expectSawEOF() {
		w.closeAfterReply = true
	}
	if w.req.ContentLength != 0 && !w.closeAfterReply && !w.fullDuplex && w.body != nil {
		w.drainBody(&setConn)
	}

	code := w.status
	if bodyAllowedForStatus(code) {
		if !s.hasCE && !s.hasCT && !hasTE && len(p) > 0 {
			setCT = http.DetectContentType(p)
		}
	} else {
		if code == http.StatusNotModified {
			s.del[delCT] = true
		}
		s.del[delCL] = true
		s.del[delTE] = true
	}
	var date []byte
	if !s.hasDate {
		date = appendDate(w.dateBuf[:0])
	}
	if hasCL && hasTE && te != "identity" {
		w.c.srv.logger().Debug("http1: WriteHeader called with both Transfer-Encoding and Content-Length", "te", te, "cl", w.contentLength)
		s.del[delCL] = true
		hasCL = false
	}
	switch {
	case w.isHEAD || !bodyAllowedForStatus(code) || code == http.StatusNoContent:
		s.del[delTE] = true
	case hasCL:
		s.del[delTE] = true
	case w.is11:
		if hasTE && te == "identity" {
			w.chunking = false
			w.closeAfterReply = true
			s.del[delTE] = true
		} else {
			w.chunking = true
			setTE = "chunked"
			if hasTE && te == "chunked" {
				s.del[delTE] = true
			}
		}
	default:
		w.closeAfterReply = true
		s.del[delTE] = true
	}
	if w.chunking {
		s.del[delCL] = true
	}
	if !w.req.ProtoAtLeast(1, 0) {
		return
	}
	delConnection := w.closeAfterReply &&
		(!keepAlives || !hasToken(w.get(delConn), "close")) &&
		!(code == http.StatusSwitchingProtocols && s.switches)
	if delConnection {
		s.del[delConn] = true
		if w.is11 {
			setConn = "close"
		}
	}

	bw := w.c.bufw
	writeStatusLine(bw, w.is11, code)
	w.writeSnapshot(bw)
	if date != nil {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.Write(date)
		_, _ = bw.WriteString("\r\n")
	}
	if setCL != nil {
		_, _ = bw.WriteString("Content-Length: ")
		_, _ = bw.Write(setCL)
		_, _ = bw.WriteString("\r\n")
	}
	for i, v := range [...]string{setCT, setConn, setTE} {
		if v != "" {
			_, _ = bw.WriteString(extraHeaderKeys[i])
			_, _ = bw.WriteString(": ")
			_, _ = bw.WriteString(v)
			_, _ = bw.WriteString("\r\n")
		}
	}
	_, _ = bw.WriteString("\r\n")
}

var extraHeaderKeys = [...]string{"Content-Type", "Connection", "Transfer-Encoding"}

// has and get answer for the snapshot's framing names, honouring drops.
func (w *response) has(which int) bool {
	s := &w.snap
	if s.del[which] {
		return false
	}
	switch which {
	case delCL:
		return s.hasCL
	case delTE:
		return s.hasTE
	case delConn:
		return s.hasConn
	}
	return s.hasCT
}

func (w *response) get(which int) string {
	s := &w.snap
	if s.del[which] {
		return ""
	}
	switch which {
	case delCL:
		return s.clValue
	case delTE:
		return s.teValue
	case delConn:
		return s.connValue
	}
	return ""
}

// writeSnapshot writes the serialized header minus the dropped names.
func (w *response) writeSnapshot(bw *bufio.Writer) {
	s := &w.snap
	cuts := [4]span{s.cl, s.te, s.conn, s.ct}
	pos := 0
	for {
		// The next dropped span after pos, in buffer order.
		next := -1
		for i, c := range cuts {
			if s.del[i] && c.end > c.start && c.start >= pos && (next < 0 || c.start < cuts[next].start) {
				next = i
			}
		}
		if next < 0 {
			break
		}
		_, _ = bw.Write(s.buf[pos:cuts[next].start])
		pos = cuts[next].end
	}
	_, _ = bw.Write(s.buf[pos:])
}

// drainBody reads what the handler left of the request body before the
// head goes out, up to 256 KiB, as net/http does so that clients that
// send a whole request before reading do not deadlock; more than that
// closes the connection.
func (w *response) drainBody(setConn *string) {
	b := w.body
	discard, tooBig := false, false
	if cur, ok := w.req.Body.(*body); ok && cur == b {
		if b.expect {
			return // read to the end already, or the connection closes
		}
		b.mu.Lock()
		switch {
		case b.closed:
			if !b.sawEOF {
				w.closeAfterReply = true
			}
		case b.unreadSizeLocked() >= maxPostHandlerReadBytes:
			tooBig = true
		default:
			discard = true
		}
		b.mu.Unlock()
	} else {
		discard = true // the handler replaced Body: read what is left of ours
	}
	if discard {
		_, err := io.CopyN(io.Discard, innerReader{b}, maxPostHandlerReadBytes+1)
		switch err {
		case nil:
			tooBig = true
		case http.ErrBodyReadAfterClose:
		case io.EOF:
			if b.innerClose() != nil {
				w.closeAfterReply = true
			}
		default:
			w.closeAfterReply = true
		}
	}
	if tooBig {
		w.closeAfterReply = true
		w.bodyLimitHit = true
		w.snap.del[delConn] = true
		*setConn = "close"
	}
}

func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == 204, status == 304:
		return false
	}
	return true
}

// writeStatusLine writes "HTTP/1.x code text\r\n" as net/http does.
func writeStatusLine(bw *bufio.Writer, is11 bool, code int) {
	v := 0
	if is11 {
		v = 1
	}
	if code >= 100 && code < 600 {
		_, _ = bw.WriteString(statusLines[v][code])
		return
	}
	_, _ = bw.WriteString(statusLine(is11, code))
}

// statusLines holds the status line of every code from 100 to 599, for
// HTTP/1.0 and HTTP/1.1, so that writing one costs no formatting.
var statusLines = func() (t [2][600]string) {
	for code := 100; code < 600; code++ {
		t[0][code] = statusLine(false, code)
		t[1][code] = statusLine(true, code)
	}
	return t
}()

func statusLine(is11 bool, code int) string {
	proto := "HTTP/1.0 "
	if is11 {
		proto = "HTTP/1.1 "
	}
	if text := http.StatusText(code); text != "" {
		return proto + strconv.Itoa(code) + " " + text + "\r\n"
	}
	return proto + fmt.Sprintf("%03d status code %d\r\n", code, code)
}

// dateCache holds the Date header's value for the current second, shared
// by every connection: formatting it costs more than looking at a clock.
var dateCache atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	b   [len(http.TimeFormat)]byte
}

// AppendDate appends now, a time just read from the clock, as an HTTP
// Date field's value (RFC 9110 IMF-fixdate), as the server writes the
// current time, to dst. It takes the time so that a caller that read the
// clock already need not read it again.
func AppendDate(dst []byte, now time.Time) []byte { return appendDateAt(dst, now) }

// AppendStatusLine appends the HTTP/1.1 status line of code, with its line
// end, as the server writes it, to dst.
func AppendStatusLine(dst []byte, code int) []byte {
	if code >= 100 && code < 600 {
		return append(dst, statusLines[1][code]...)
	}
	return append(dst, statusLine(true, code)...)
}

func appendDate(dst []byte) []byte { return appendDateAt(dst, time.Now()) }

func appendDateAt(dst []byte, now time.Time) []byte {
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return append(dst, d.b[:]...)
	}
	d := &dateValue{sec: sec}
	now.UTC().AppendFormat(d.b[:0], http.TimeFormat)
	dateCache.Store(d)
	return append(dst, d.b[:]...)
}

func (w *response) Flush() { _ = w.FlushError() }

// FlushError sends what the handler wrote so far, head included; it is
// what http.ResponseController.Flush calls.
func (w *response) FlushError() error {
	if w.c.hijackedFast() {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	err := w.ww.Flush()
	if e := w.cw.flush(); err == nil {
		err = e
	}
	return err
}

// SetReadDeadline sets the connection's read deadline, for
// http.ResponseController. Once the request body has been read, the
// deadline also cancels the request's context when it passes, as
// net/http's background read does when its read times out.
func (w *response) SetReadDeadline(t time.Time) error {
	w.c.rd = t
	err := w.c.rwc.SetReadDeadline(t)
	w.c.handlerReadDeadline(t)
	return err
}

// SetWriteDeadline sets the connection's write deadline, for
// http.ResponseController.
func (w *response) SetWriteDeadline(t time.Time) error {
	w.c.wd, w.c.wdWithin, w.c.wdLeft = t, false, false
	return w.c.rwc.SetWriteDeadline(t)
}

// SetWriteDeadlineWithin sets the connection's write deadline to t, or
// leaves the one set by an earlier call of it in place when that expires
// no earlier than t and at most slack later. Unlike a deadline set with
// SetWriteDeadline, which the server clears when the request ends, it is
// left for the connection's next request: a handler that sets one for
// every request (a send timeout) then costs a timer update only when the
// deadline must move, as nginx moves a timer only by more than 300 ms. If
// the next request's handler does not renew it, it is cleared before that
// request's response is written.
func (w *response) SetWriteDeadlineWithin(t time.Time, slack time.Duration) error {
	if t.IsZero() {
		return w.SetWriteDeadline(t)
	}
	return w.c.writeDeadlineWithin(t, max(slack, 0))
}

// EnableFullDuplex lets the handler write before it read the whole
// request body, for http.ResponseController.
func (w *response) EnableFullDuplex() error {
	w.fullDuplex = true
	return nil
}

// Hijack hands the connection to the handler, as net/http's does: the head
// already written is flushed, deadlines are cleared, and the returned
// reader holds the bytes read past the request.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.handlerDone.Load() {
		panic("http1: Hijack called after ServeHTTP finished")
	}
	w.disableWriteContinue()
	if w.wroteHeader {
		_ = w.cw.flush()
	}
	return w.c.hijack()
}

// finishRequest completes the response after the handler returned.
func (w *response) finishRequest() {
	w.handlerDone.Store(true)
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	_ = w.ww.Flush()
	w.cw.close()
	_ = w.c.bufw.Flush()
	if w.body != nil {
		_ = w.body.innerClose()
	}
	if w.req.MultipartForm != nil {
		_ = w.req.MultipartForm.RemoveAll()
	}
}

// shouldReuseConnection reports whether another request may be read.
func (w *response) shouldReuseConnection() bool {
	if w.closeAfterReply {
		return false
	}
	if !w.isHEAD && w.contentLength != -1 && bodyAllowedForStatus(w.status) && w.contentLength != w.written {
		return false // the handler wrote less than it declared
	}
	if w.c.werr != nil {
		return false
	}
	return !w.closedRequestBodyEarly()
}

func (w *response) closedRequestBodyEarly() bool {
	return w.body != nil && !w.body.expect && w.body.didEarlyClose()
}

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
	_ http.Hijacker       = (*response)(nil)
)
