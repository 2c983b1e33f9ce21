package h2check

import (
	"bytes"
	"io"
	"testing"

	"golang.org/x/net/http2"
)

// BenchmarkInspector reads a client stream of 1000 requests (HEADERS frames
// as a browser or h2load sends them, the second on mostly indexed fields)
// and WINDOW_UPDATEs, with a 4 KiB buffer as Go's server does: through the
// inspector, and straight, the baseline in the same run.
func BenchmarkInspector(b *testing.B) {
	s := newStream()
	_ = s.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	for i := range uint32(1000) {
		s.request(&testing.T{}, 2*i+1, "user-agent", "h2load nghttp2/1.52.0", "accept-encoding", "gzip, deflate")
		_ = s.fr.WriteWindowUpdate(0, 100)
	}
	stream := s.buf.Bytes()
	buf := make([]byte, 4096)
	for _, bc := range []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"straight", func(r io.Reader) io.Reader { return r }},
		{"inspected", func(r io.Reader) io.Reader {
			return newInspector(r, MaxFrameSize, defaultTableSize, maxHeaderString)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				r := bc.wrap(bytes.NewReader(stream))
				for {
					if _, err := r.Read(buf); err != nil {
						break
					}
				}
			}
		})
	}
}
