package intercept

// A FirstBytes is what the first bytes a client sends inside a CONNECT
// tunnel look like.
type FirstBytes int

// Verdicts of [SniffFirstBytes].
const (
	// NeedMore: the bytes so far could still be either; read more.
	NeedMore FirstBytes = iota
	// TLSClientHello: a TLS handshake record holding a ClientHello.
	TLSClientHello
	// PlainHTTP: an HTTP/1.x request line (or the HTTP/2 cleartext
	// preface), a client speaking plain HTTP into the tunnel.
	PlainHTTP
	// Other: neither.
	Other
)

// SniffMax is how many bytes [SniffFirstBytes] needs at most to decide.
const SniffMax = 8

// maxMethod is the longest method token a plain request is recognised by
// ("CONNECT", "OPTIONS").
const maxMethod = 7

// String names the verdict.
func (f FirstBytes) String() string {
	switch f {
	case NeedMore:
		return "need more"
	case TLSClientHello:
		return "TLS ClientHello"
	case PlainHTTP:
		return "plain HTTP"
	case Other:
		return "neither TLS nor HTTP"
	}
	return "unknown"
}

// SniffFirstBytes tells from the first bytes a client sent into a tunnel
// whether it starts a TLS handshake, so that an interceptor answers a
// plain-text client clearly instead of failing a handshake on it. It needs
// at most SniffMax bytes and looks at no more.
//
// A TLS ClientHello starts with a handshake record (RFC 8446 §5.1): type
// 22, legacy version 3.x with x ≤ 4, a length from 1 to 2^14 + 2048, and
// the handshake type 1 (ClientHello). A plain request starts with an
// upper-case method of at most seven letters and a space ("GET ", "PRI "
// of the HTTP/2 preface). Anything else, SSLv2-style hellos included, is
// Other.
func SniffFirstBytes(b []byte) FirstBytes {
	if len(b) == 0 {
		return NeedMore
	}
	if b[0] == 0x16 {
		return sniffTLS(b)
	}
	return sniffMethod(b)
}

func sniffTLS(b []byte) FirstBytes {
	if len(b) >= 2 && b[1] != 0x03 {
		return Other
	}
	if len(b) >= 3 && b[2] > 0x04 {
		return Other
	}
	if len(b) < 6 {
		return NeedMore
	}
	n := int(b[3])<<8 | int(b[4])
	if n == 0 || n > 1<<14+2048 || b[5] != 0x01 {
		return Other
	}
	return TLSClientHello
}

func sniffMethod(b []byte) FirstBytes {
	for i, c := range b {
		switch {
		case c == ' ' && i > 0:
			return PlainHTTP
		case c < 'A' || c > 'Z' || i >= maxMethod:
			return Other
		}
	}
	return NeedMore
}
