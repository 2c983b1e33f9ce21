package http1

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
)

// corpusCase is one input of the differential tests: raw bytes from a
// client, and the statuses net/http answers them with, in order ("" when
// it closes without answering). The statuses document net/http's
// behaviour; the tests check that net/http still behaves so and that our
// server does exactly the same.
type corpusCase struct {
	name string
	raw  string
	want string
}

// h is a valid head prefix for HTTP/1.1 requests.
const h = "Host: example.com\r\n"

// hostileCorpus lists the request-smuggling and malformed-request
// patterns, each with what net/http does with it. Several are accepted by
// net/http and so by us (noted "accepted"): RFC 9112 lets a server accept
// them, and both servers normalize them the same way before a handler or
// an upstream sees them.
var hostileCorpus = []corpusCase{
	// Plain requests.
	{"get", "GET / HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"get http/1.0 no host", "GET / HTTP/1.0\r\n\r\n", "200"},
	{"get http/1.1 no host", "GET / HTTP/1.1\r\n\r\n", "400"},
	{"empty host accepted", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "200"},
	{"two hosts", "GET / HTTP/1.1\r\n" + h + h + "\r\n", "400"},
	{"host with space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "400"},
	{"host with slash", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", "400"},
	{"host with userinfo", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", "400"},
	{"host with ctl", "GET / HTTP/1.1\r\nHost: a\x01b\r\n\r\n", "400"},
	{"host ipv6", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", "200"},
	{"absolute form", "GET http://a.example/x?y HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"absolute form without host", "GET http://a.example/x HTTP/1.1\r\n\r\n", "400"},
	{"absolute form https userinfo", "GET https://u:p@a.example:8443/x HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"absolute form bad port", "GET http://a.example:x/ HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"absolute form bad escape in host", "GET http://a%zz/ HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"scheme only", "GET http: HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"connect authority", "CONNECT a.example:443 HTTP/1.1\r\n\r\n", "200"},
	{"connect path", "CONNECT /rpc HTTP/1.1\r\n\r\n", "200"},
	{"connect bad authority", "CONNECT a b:443 HTTP/1.1\r\n\r\n", "400"},
	{"options star", "OPTIONS * HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"options star with body", "OPTIONS * HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\nabc", "200"},
	{"options star with long body", "OPTIONS * HTTP/1.1\r\n" + h + "Content-Length: 5000\r\n\r\n" + strings.Repeat("b", 5000) + "GET / HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"get star", "GET * HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "200"},
	{"h2 preface with header needs host", "PRI * HTTP/2.0\r\nX: y\r\n\r\n", "400"},

	// Versions.
	{"http/2.0", "GET / HTTP/2.0\r\n" + h + "\r\n", "505"},
	{"http/3.0", "GET / HTTP/3.0\r\n" + h + "\r\n", "505"},
	{"http/0.9 line", "GET /\r\n\r\n", "400"},
	{"http/0.0", "GET / HTTP/0.0\r\n" + h + "\r\n", "505"},
	{"http/1.2 accepted", "GET / HTTP/1.2\r\n" + h + "\r\n", "200"},
	{"http/1.9 no host", "GET / HTTP/1.9\r\n\r\n", "400"},
	{"http/1.10", "GET / HTTP/1.10\r\n" + h + "\r\n", "400"},
	{"lowercase version", "GET / http/1.1\r\n" + h + "\r\n", "400"},
	{"version with plus", "GET / HTTP/+.1\r\n" + h + "\r\n", "400"},

	// Request line.
	{"double space", "GET  / HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"tab separator", "GET\t/ HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"trailing space", "GET / HTTP/1.1 \r\n" + h + "\r\n", "400"},
	{"lowercase method accepted", "get / HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"method with paren", "GE(T / HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"method with 8bit", "G\xc9T / HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"empty method", " / HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"empty target", "GET  HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"leading crlf", "\r\nGET / HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"bare lf everywhere accepted", "GET / HTTP/1.1\nHost: a\n\n", "200"},
	{"cr in request line", "GET /\r HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"request line cr cr lf", "GET / HTTP/1.1\r\r\n" + h + "\r\n", "400"},
	{"bare cr line end", "GET / HTTP/1.1\r" + h + "\r\n", "400"},
	{"target ctl", "GET /a\x01 HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"target del", "GET /a\x7f HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"target fragment", "GET /a#b HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"target bad escape", "GET /%zz HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"target escaped slash", "GET /a%2Fb HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"target double slash", "GET //a/./b/../c HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"target 8bit", "GET /\xc3\xa9 HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"target query only", "GET ?x HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"target force query", "GET /a? HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"target two question marks", "GET /a?b? HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"target query with 8bit and quotes", "GET /a?b=\"\xff\" HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"target relative", "GET a/b HTTP/1.1\r\n" + h + "\r\n", "400"},
	{"target semicolon", "GET /a;b=c HTTP/1.1\r\n" + h + "\r\n", "200"},

	// Header lines.
	{"no colon", "GET / HTTP/1.1\r\n" + h + "Foo\r\n\r\n", "400"},
	{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", "400"},
	{"space in name", "GET / HTTP/1.1\r\n" + h + "Fo o: x\r\n\r\n", "400"},
	{"tab before colon", "GET / HTTP/1.1\r\n" + h + "Foo\t: x\r\n\r\n", "400"},
	{"empty name", "GET / HTTP/1.1\r\n" + h + ": x\r\n\r\n", "400"},
	{"name with 8bit", "GET / HTTP/1.1\r\n" + h + "F\xc3o: x\r\n\r\n", "400"},
	{"first header folded", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", "400"},
	{"obs-fold accepted", "GET / HTTP/1.1\r\n" + h + "X-A: a\r\n b\r\n\tc\r\n\r\n", "200"},
	{"obs-fold empty continuation", "GET / HTTP/1.1\r\n" + h + "X-A: a\r\n \r\n\r\n", "200"},
	{"obs-fold onto host", "GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", "400"},
	{"obs-fold content-length", "POST / HTTP/1.1\r\n" + h + "Content-Length: 5\r\n \r\n\r\nhello", "200"},
	{"obs-fold transfer-encoding value", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding:\r\n chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "200"},
	{"obs-fold transfer-encoding list", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n , gzip\r\n\r\n", "501"},
	{"value with nul", "GET / HTTP/1.1\r\n" + h + "X: a\x00b\r\n\r\n", "400"},
	{"value with bare cr", "GET / HTTP/1.1\r\n" + h + "X: a\rb\r\n\r\n", "400"},
	{"value with del", "GET / HTTP/1.1\r\n" + h + "X: a\x7fb\r\n\r\n", "400"},
	{"value with 8bit accepted", "GET / HTTP/1.1\r\n" + h + "X: a\x80\xffb\r\n\r\n", "200"},
	{"value ends cr cr lf", "GET / HTTP/1.1\r\n" + h + "X: a\r\r\n\r\n", "400"},
	{"lf then cr line", "GET / HTTP/1.1\r\n" + h + "X: a\n\rY: b\r\n\r\n", "400"},
	{"head ends lf lf", "GET / HTTP/1.1\r\n" + h + "\n", "200"},
	{"head ends lf crlf", "GET / HTTP/1.1\n" + h + "\r\n", "200"},
	{"value whitespace trimmed", "GET / HTTP/1.1\r\n" + h + "X:  \t a b \t \r\n\r\n", "200"},
	{"lowercase names canonicalized", "GET / HTTP/1.1\r\nhOST: a\r\nx-forwarded-for: 1.2.3.4\r\nx-custom-thing: y\r\n\r\n", "200"},
	{"pragma no-cache adds cache-control", "GET / HTTP/1.1\r\n" + h + "Pragma: no-cache\r\n\r\n", "200"},
	{"repeated header", "GET / HTTP/1.1\r\n" + h + "Accept: a\r\nAccept: b\r\naccept: c\r\n\r\n", "200"},

	// Content-Length and Transfer-Encoding.
	{"cl body", "POST / HTTP/1.1\r\n" + h + "Content-Length: 5\r\n\r\nhello", "200"},
	{"cl and te accepted te wins", "POST / HTTP/1.1\r\n" + h + "Content-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "200"},
	{"te and bad cl", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n0\r\n\r\n", "400"},
	{"duplicate cl equal", "POST / HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", "200"},
	{"duplicate cl equal after trim", "POST / HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 5 \r\n\r\nhello", "200"},
	{"duplicate cl differ", "POST / HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", "400"},
	{"cl list", "POST / HTTP/1.1\r\n" + h + "Content-Length: 5, 5\r\n\r\nhello", "400"},
	{"cl plus", "POST / HTTP/1.1\r\n" + h + "Content-Length: +5\r\n\r\nhello", "400"},
	{"cl minus", "POST / HTTP/1.1\r\n" + h + "Content-Length: -5\r\n\r\nhello", "400"},
	{"cl hex", "POST / HTTP/1.1\r\n" + h + "Content-Length: 0x5\r\n\r\nhello", "400"},
	{"cl empty", "POST / HTTP/1.1\r\n" + h + "Content-Length:\r\n\r\n", "400"},
	{"cl leading zeros", "POST / HTTP/1.1\r\n" + h + "Content-Length: 005\r\n\r\nhello", "200"},
	{"cl underscore", "POST / HTTP/1.1\r\n" + h + "Content-Length: 1_0\r\n\r\nhello", "400"},
	{"cl too large", "POST / HTTP/1.1\r\n" + h + "Content-Length: 99999999999999999999\r\n\r\n", "400"},
	{"cl max", "POST / HTTP/1.1\r\n" + h + "Content-Length: 9223372036854775807\r\n\r\nabc", "200"},
	{"cl short body", "POST / HTTP/1.1\r\n" + h + "Content-Length: 10\r\n\r\nabc", "200"},
	{"cl on get", "GET / HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n" + h + "\r\n", "200 200"},
	{"cl zero", "POST / HTTP/1.1\r\n" + h + "Content-Length: 0\r\n\r\n", "200"},
	{"cl name with space", "POST / HTTP/1.1\r\n" + h + "Content-Length : 5\r\n\r\nhello", "400"},
	{"te gzip", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip\r\n\r\n", "501"},
	{"te gzip chunked", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "501"},
	{"te chunked gzip", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked, gzip\r\n\r\n", "501"},
	{"te chunked chunked", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked, chunked\r\n\r\n", "501"},
	{"te two fields", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "501"},
	{"te identity", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: identity\r\n\r\n", "501"},
	{"te empty", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding:\r\n\r\n", "501"},
	{"te mixed case", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: ChUnKeD\r\n\r\n0\r\n\r\n", "200"},
	{"te with 8bit", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\xff\r\n\r\n", "501"},
	{"te name with space", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", "400"},
	{"te underscore is another header", "POST / HTTP/1.1\r\n" + h + "Transfer_Encoding: chunked\r\n\r\n", "200"},
	{"te before bad host", "POST / HTTP/1.1\r\nHost: a b\r\nTransfer-Encoding: gzip\r\n\r\n", "501"},
	// Before HTTP/1.0, net/http ignores a Transfer-Encoding and refuses the
	// version; ours does the same (its 400 is for HTTP/1.0 only).
	{"te on http/0.1 is a version refusal", "T / HTTP/0.1\nt:\nTransfer-Encoding:\n\n", "505"},
	{"te chunked on http/0.9", "POST / HTTP/0.9\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "505"},
	// Ours departs from net/http on the next five on purpose (departureOf):
	// it refuses a Transfer-Encoding on HTTP/1.0 with 400, and closes the
	// connection after a request with Content-Length and Transfer-Encoding.
	{"cl then te closes", "POST / HTTP/1.1\r\n" + h + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 200"},
	{"te then cl zero closes", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 200"},
	{"te on http/1.0 ignored", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "200 400"},
	{"te gzip on http/1.0 ignored", "POST / HTTP/1.0\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nhi", "200"},
	{"te on http/1.0 with cl", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello", "200"},

	// Chunked bodies.
	{"chunked", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "200"},
	{"chunked uppercase hex", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", "200"},
	{"chunked extension", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5;a=b;c=\"d\"\r\nhello\r\n0;x\r\n\r\n", "200"},
	{"chunked extension ctl", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5;\x01\x00\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked size trailing space", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5 \t\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked size leading space", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked space before extension", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5 ;x\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked 0x prefix", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked negative", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n-1\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked 16 digits", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0000000000000005\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked 17 digits", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n00000000000000005\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked huge size", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nhello", "200"},
	{"chunked bare lf size", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", "200"},
	{"chunked bare lf after data", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n", "200"},
	{"chunked data too long", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n", "200"},
	{"chunked cr in size line", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r;x\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked empty size", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked no last chunk", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", "200"},
	{"chunked no final crlf", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n", "200"},
	{"chunked trailer", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTrailer: X-T, x-u\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\nx-u: 2\r\nX-V: 3\r\n\r\n", "200"},
	{"chunked trailer folded", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\nX-T: a\r\n b\r\n\r\n", "200"},
	{"chunked trailer bad line", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\nbad\r\n\r\nGET / HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"chunked trailer lf end", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\n\nGET / HTTP/1.1\r\n" + h + "\r\n", "200 200"},
	{"chunked trailer lf then crlfcrlf", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\nX: a\n\nGET / HTTP/1.1\r\n" + h + "\r\n\r\n", "200 200"},
	{"chunked trailer too long", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\nX: " + strings.Repeat("a", 5000) + "\r\n\r\n", "200"},
	{"chunked long extension", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5;" + strings.Repeat("x", 4100) + "\r\nhello\r\n0\r\n\r\n", "200"},
	{"chunked excess overhead", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1;"+strings.Repeat("e", 200)+"\r\nx\r\n", 100) + "0\r\n\r\n", "200"},
	{"trailer declares cl", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n0\r\n\r\n", "400"},
	{"trailer declares te lowercase", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTrailer: a, transfer-encoding\r\n\r\n0\r\n\r\n", "400"},
	{"trailer declared without chunked", "POST / HTTP/1.1\r\n" + h + "Trailer: Content-Length\r\nContent-Length: 2\r\n\r\nhi", "200"},
	{"chunked then pipelined", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 200"},

	// Pipelining and connection reuse.
	{"two gets", "GET /1 HTTP/1.1\r\n" + h + "\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 200"},
	{"get then garbage", "GET /1 HTTP/1.1\r\n" + h + "\r\nxyz\r\n\r\n", "200 400"},
	{"post then get", "POST /1 HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\nabcGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 200"},
	{"post crlf get", "POST /1 HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\nabc\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 200"},
	{"post lflf get", "POST /1 HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\nabc\n\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 200"},
	{"post five crlf get", "POST /1 HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\nabc\r\n\r\n\rGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 400"},
	{"get crlf get", "GET /1 HTTP/1.1\r\n" + h + "\r\n\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 400"},
	{"connection close", "GET /1 HTTP/1.1\r\n" + h + "Connection: close\r\n\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"connection close in list", "GET /1 HTTP/1.1\r\n" + h + "Connection: foo, CLOSE\r\n\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200"},
	{"http/1.0 closes", "GET /1 HTTP/1.0\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", "200"},
	{"http/1.0 keep-alive", "GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", "200 200"},
	{"http/1.0 keep-alive head", "HEAD /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", "200 200"},
	{"trailing partial bytes", "GET /1 HTTP/1.1\r\n" + h + "\r\nGE", "200"},
	{"truncated head", "GET / HTTP/1.1\r\nHost: a", "400"},
	{"truncated request line", "GET / HT", "400"},
	{"only crlf", "\r\n", "400"},
	{"empty", "", ""},

	// Expect.
	{"expect 100-continue", "POST / HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: 3\r\n\r\nabc", "100 200"},
	{"expect 100-continue no body", "POST / HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: 0\r\n\r\n", "200"},
	{"expect 100-continue chunked", "POST / HTTP/1.1\r\n" + h + "Expect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "100 200"},
	{"expect 100-continue http/1.0", "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc", "200"},
	{"expect other", "POST / HTTP/1.1\r\n" + h + "Expect: 200-ok\r\nContent-Length: 3\r\n\r\nabc", "417"},
	{"expect list", "POST / HTTP/1.1\r\n" + h + "Expect: foo, 100-continue\r\nContent-Length: 3\r\n\r\nabc", "100 200"},
}

// statusesOf returns the status codes of the responses in out, in order.
func statusesOf(out string) string {
	var codes []string
	for _, m := range statusLineRE.FindAllStringSubmatch(out, -1) {
		codes = append(codes, m[1])
	}
	return strings.Join(codes, " ")
}

var statusLineRE = regexp.MustCompile(`HTTP/1\.[01] (\d{3})[ \r]`)

// generatedCorpus returns inputs that put every byte value in every place
// of a request where one could change its meaning, each line-end variant,
// and n random mutations of the hostile corpus (seeded, so every run sees
// the same inputs).
func generatedCorpus(n int) []corpusCase {
	var out []corpusCase
	add := func(name, raw string) { out = append(out, corpusCase{name: name, raw: raw}) }
	for c := range 256 {
		b := string([]byte{byte(c)})
		add(fmt.Sprintf("method byte %#x", c), "G"+b+"T / HTTP/1.1\r\n"+h+"\r\n")
		add(fmt.Sprintf("target byte %#x", c), "GET /a"+b+"b?c"+b+"d HTTP/1.1\r\n"+h+"\r\n")
		add(fmt.Sprintf("version byte %#x", c), "GET / HTTP/1"+b+"1\r\n"+h+"\r\n")
		add(fmt.Sprintf("name byte %#x", c), "GET / HTTP/1.1\r\n"+h+"X"+b+"Y: v\r\n\r\n")
		add(fmt.Sprintf("value byte %#x", c), "GET / HTTP/1.1\r\n"+h+"X: a"+b+"b\r\n\r\n")
		add(fmt.Sprintf("value start byte %#x", c), "GET / HTTP/1.1\r\n"+h+"X:"+b+"b\r\n\r\n")
		add(fmt.Sprintf("line start byte %#x", c), "GET / HTTP/1.1\r\n"+h+b+"X: b\r\n\r\n")
		add(fmt.Sprintf("host byte %#x", c), "GET / HTTP/1.1\r\nHost: a"+b+"b\r\n\r\n")
		add(fmt.Sprintf("cl byte %#x", c), "POST / HTTP/1.1\r\n"+h+"Content-Length: 1"+b+"\r\n\r\nhello world")
		add(fmt.Sprintf("te byte %#x", c), "POST / HTTP/1.1\r\n"+h+"Transfer-Encoding: chunked"+b+"\r\n\r\n0\r\n\r\n")
		add(fmt.Sprintf("chunk size byte %#x", c), "POST / HTTP/1.1\r\n"+h+"Transfer-Encoding: chunked\r\n\r\n5"+b+"\r\nhello\r\n0\r\n\r\n")
		add(fmt.Sprintf("chunk ext byte %#x", c), "POST / HTTP/1.1\r\n"+h+"Transfer-Encoding: chunked\r\n\r\n5;"+b+"\r\nhello\r\n0\r\n\r\n")
		add(fmt.Sprintf("chunk end byte %#x", c), "POST / HTTP/1.1\r\n"+h+"Transfer-Encoding: chunked\r\n\r\n5\r\nhello"+b+"\n0\r\n\r\n")
		add(fmt.Sprintf("trailer byte %#x", c), "POST / HTTP/1.1\r\n"+h+"Transfer-Encoding: chunked\r\n\r\n0\r\nX: a"+b+"\r\n\r\n")
		add(fmt.Sprintf("between requests byte %#x", c), "POST / HTTP/1.1\r\n"+h+"Content-Length: 1\r\n\r\nx"+b+"GET / HTTP/1.1\r\n"+h+"\r\n")
	}
	// Every CRLF of a chunked request, in turn, as LF, CR, CRCRLF and LFCR.
	base := "POST /p HTTP/1.1\r\n" + h + "X: y\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n"
	for i := 0; ; {
		j := strings.Index(base[i:], "\r\n")
		if j < 0 {
			break
		}
		at := i + j
		for _, alt := range []string{"\n", "\r", "\r\r\n", "\n\r", "\r\n\r\n", " \r\n", "\r\n "} {
			add(fmt.Sprintf("line end %d as %q", at, alt), base[:at]+alt+base[at+2:])
		}
		i = at + 2
	}
	rng := rand.New(rand.NewPCG(19, 2026))
	specials := []byte(" \t\r\n:,;0aAf-_\x00\x7f\x80\xff/?%#")
	// Mutations start from the cases net/http answers without its 500 ms
	// pause before closing, so that the test stays quick.
	var bases []string
	for _, tc := range hostileCorpus {
		if !strings.Contains(tc.name, "long body") && tc.name != "cl max" {
			bases = append(bases, tc.raw)
		}
	}
	for k := range n {
		src := bases[rng.IntN(len(bases))]
		b := []byte(src)
		for range 1 + rng.IntN(3) {
			if len(b) == 0 {
				break
			}
			at := rng.IntN(len(b))
			switch rng.IntN(5) {
			case 0: // insert a special byte
				b = append(b[:at], append([]byte{specials[rng.IntN(len(specials))]}, b[at:]...)...)
			case 1: // delete a byte
				b = append(b[:at], b[at+1:]...)
			case 2: // replace a byte
				b[at] = specials[rng.IntN(len(specials))]
			case 3: // duplicate a line
				ls := strings.SplitAfter(string(b), "\n")
				i := rng.IntN(len(ls))
				ls = append(ls[:i+1], ls[i:]...)
				b = []byte(strings.Join(ls, ""))
			case 4: // flip case
				if c := b[at]; 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' {
					b[at] ^= 0x20
				}
			}
		}
		add(fmt.Sprintf("mutation %d", k), string(b))
	}
	return out
}

// bufferEdgeCorpus holds inputs at net/http's 4096-byte buffer edges.
var bufferEdgeCorpus = func() []corpusCase {
	var out []corpusCase
	for _, n := range []int{4093, 4094, 4095, 4096, 8188, 8190, 8191} {
		line := "5;" + strings.Repeat("x", n)
		out = append(out, corpusCase{name: fmt.Sprintf("truncated request line %d", len(line)), raw: line})
		out = append(out, corpusCase{name: fmt.Sprintf("truncated request line %d after request", len(line)), raw: "GET / HTTP/1.1\r\n" + h + "\r\n" + line})
		cr := strings.Repeat("y", n-1) + "\r" + "z"
		out = append(out, corpusCase{name: fmt.Sprintf("truncated request line with cr %d", len(cr)), raw: cr})
		out = append(out, corpusCase{name: fmt.Sprintf("long header line %d", n), raw: "GET / HTTP/1.1\r\n" + h + "X: " + strings.Repeat("v", n) + "\r\n\r\n"})
		out = append(out, corpusCase{name: fmt.Sprintf("long chunk line %d", n), raw: "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("e", n-5) + "\r\nx\r\n0\r\n\r\n"})
		out = append(out, corpusCase{name: fmt.Sprintf("long trailer %d", n), raw: "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\nX: " + strings.Repeat("t", n-9) + "\r\n\r\n"})
	}
	return out
}()
