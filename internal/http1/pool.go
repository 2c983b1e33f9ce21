package http1

import (
	"bufio"
	"io"
	"sync"
)

// The buffers of a connection come from pools and go back when it ends,
// as net/http pools its bufio readers and writers, so that a connection
// serving one request does not cost 10 KiB of fresh memory. Nothing a
// handler can hold is pooled: the buffers behind a hijacked connection
// are never put back.
var (
	readBufPool  = sync.Pool{New: func() any { b := make([]byte, minReadBuf); return &b }}
	writer4kPool sync.Pool
	writer2kPool sync.Pool
)

func getReadBuf() []byte { return *readBufPool.Get().(*[]byte) }

func putReadBuf(b []byte) {
	if cap(b) != minReadBuf {
		return // grown for a large head: let it go
	}
	readBufPool.Put(&b)
}

func getWriter(pool *sync.Pool, w io.Writer, size int) *bufio.Writer {
	if v := pool.Get(); v != nil {
		bw := v.(*bufio.Writer)
		bw.Reset(w)
		return bw
	}
	return bufio.NewWriterSize(w, size)
}

func putWriter(pool *sync.Pool, bw *bufio.Writer) {
	bw.Reset(nil)
	pool.Put(bw)
}

// releaseBuffers returns the connection's buffers to their pools; the
// connection must not be used after.
func (c *conn) releaseBuffers() {
	if c.bufw != nil {
		putWriter(&writer4kPool, c.bufw)
		c.bufw = nil
	}
	if c.resp.ww != nil {
		putWriter(&writer2kPool, c.resp.ww)
		c.resp.ww = nil
	}
	if c.rr.in.buf != nil {
		putReadBuf(c.rr.in.buf)
		c.rr.in.buf = nil
	}
}
