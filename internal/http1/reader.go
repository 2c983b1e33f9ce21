package http1

import (
	"io"
)

// minReadBuf is the size of a connection's read buffer, which is also the
// longest chunk-size line and trailer section a chunked body may have, as
// in net/http (whose bufio.Reader is this size).
const minReadBuf = 4096

// inbuf is a connection's read buffer: the bytes read from src and not yet
// consumed are buf[r:w]. Unlike a bufio.Reader it grows, so that a whole
// request head, up to the server's limit, can be parsed in place.
type inbuf struct {
	src  io.Reader
	buf  []byte
	r, w int
	err  error // sticky error of src, returned once the buffer is drained

	// onErr, if set, is called when a read from src fails: the connection
	// cancels the request in flight, as net/http's does on any read error.
	onErr func()
}

func (b *inbuf) reset(src io.Reader) {
	b.src = src
	b.r, b.w = 0, 0
	b.err = nil
	if b.buf == nil {
		b.buf = getReadBuf()
	}
}

// bufferedConn is a connection whose first bytes were read already, by
// the code that hands it to the server (an event loop that gives back a
// connection it read a head of): TakeBuffered returns them, for the
// caller to own, and Read what follows.
type bufferedConn interface {
	TakeBuffered() []byte
}

// adopt makes p, bytes read from the source already, the first to read,
// on a buffer that holds nothing yet. p becomes the buffer, its capacity
// beyond its length free to fill, when it is at least minReadBuf bytes
// large: a head read up to the limit elsewhere is neither copied nor read
// again into a buffer grown by doubling. A smaller p is copied.
func (b *inbuf) adopt(p []byte) {
	if len(p) == 0 || b.buffered() != 0 {
		return // nothing to take, or not at the start (never, from init)
	}
	if cap(p) < minReadBuf {
		b.r, b.w = 0, copy(b.buf, p)
		return
	}
	if b.buf != nil {
		putReadBuf(b.buf)
	}
	b.buf = p[:cap(p)]
	b.r, b.w = 0, len(p)
}

// cap returns the buffer's current size: filling up to it never grows the
// buffer.
func (b *inbuf) cap() int { return len(b.buf) }

// buffered returns the number of unconsumed bytes.
func (b *inbuf) buffered() int { return b.w - b.r }

// bytes returns the unconsumed bytes; they stay valid until the next fill.
func (b *inbuf) bytes() []byte { return b.buf[b.r:b.w] }

// discard consumes n buffered bytes.
func (b *inbuf) discard(n int) {
	b.r += n
	if b.r == b.w {
		b.r, b.w = 0, 0
	}
}

// fill reads once from src, making room first: it moves the unconsumed
// bytes to the front and, when the buffer is full, grows it up to max bytes
// of unconsumed data. It returns the read error, if any (the error is also
// kept for later calls); io.ErrShortBuffer when the buffer already holds
// max bytes. A read of zero bytes without error is retried a few times, as
// bufio does.
func (b *inbuf) fill(max int) error {
	if b.err != nil {
		return b.err
	}
	if b.r > 0 && (b.w == len(b.buf) || b.r >= len(b.buf)/2) {
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	if b.w == len(b.buf) {
		if b.w >= max {
			return io.ErrShortBuffer
		}
		n := min(2*len(b.buf), max)
		nb := make([]byte, n)
		copy(nb, b.buf[:b.w])
		b.buf = nb
	}
	for range 100 {
		n, err := b.src.Read(b.buf[b.w:])
		if n < 0 || n > len(b.buf)-b.w {
			panic("http1: reader returned an invalid count")
		}
		b.w += n
		if err != nil {
			b.err = err
			if b.onErr != nil {
				b.onErr()
			}
			return err
		}
		if n > 0 {
			return nil
		}
	}
	b.err = io.ErrNoProgress
	return b.err
}

// fillTo reads until at least n bytes are buffered, the source fails, or the
// buffer cannot grow past max.
func (b *inbuf) fillTo(n, max int) error {
	for b.buffered() < n {
		if err := b.fill(max); err != nil {
			return err
		}
	}
	return nil
}

// read copies buffered bytes into p, or reads straight from src into p when
// nothing is buffered and p is at least as large as the buffer.
func (b *inbuf) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.buffered() == 0 {
		if b.err != nil {
			return 0, b.err
		}
		if len(p) >= len(b.buf) {
			n, err := b.src.Read(p)
			if err != nil {
				b.err = err
				if b.onErr != nil {
					b.onErr()
				}
			}
			return n, err
		}
		if err := b.fill(len(b.buf)); err != nil && b.buffered() == 0 {
			return 0, err
		}
	}
	n := copy(p, b.bytes())
	b.discard(n)
	return n, nil
}

// unreadByte appends c after the buffered bytes: the byte a background read
// took from the connection, which follows everything buffered.
func (b *inbuf) appendByte(c byte) {
	if b.w == len(b.buf) {
		if b.r > 0 {
			copy(b.buf, b.buf[b.r:b.w])
			b.w -= b.r
			b.r = 0
		} else {
			nb := make([]byte, 2*len(b.buf))
			copy(nb, b.buf[:b.w])
			b.buf = nb
		}
	}
	b.buf[b.w] = c
	b.w++
}

// shrink drops a buffer grown for a large head once it holds little, so
// that an idle connection keeps only minReadBuf bytes.
func (b *inbuf) shrink() {
	if len(b.buf) <= minReadBuf || b.buffered() > minReadBuf {
		return
	}
	nb := make([]byte, minReadBuf)
	b.w = copy(nb, b.bytes())
	b.r = 0
	b.buf = nb
}
