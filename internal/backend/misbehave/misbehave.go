// Package misbehave is a raw-TCP HTTP/1.1 server that breaks the protocol on
// purpose, in every way an upstream can put bytes on a connection that no
// request asked for, or end a connection a client may still want to reuse.
// Tests put it behind the upstream client and the daemon to prove that a
// response only ever reaches the client whose request it answers.
//
// Every proper answer names its request: the header [AnswerHeader] holds the
// request's method and target, and the body is [Answer] of them. A stray
// response (the bytes a [Fault] adds) is a copy of the proper answer to the
// request just served, with its body: a client that receives it in answer to
// another request sees another request's method and target, which is how the
// tests tell a leak from a correct answer.
package misbehave

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// AnswerHeader is the response header naming the request an answer is for:
// its method, a space and its request target.
const AnswerHeader = "Answer-To"

// Answer returns the body of the proper answer to a request with method and
// target (the request target as sent, path and query).
func Answer(method, target string) string {
	return "answer to " + method + " " + target + "\n"
}

// Fault is one way the server breaks HTTP/1.1. Faults marked late act on a
// connection after its answer, while the client holds it idle: when
// [Server.Release] is called, or on their own [Config.LateAfter] after the
// answer.
type Fault int

const (
	// None answers every request properly.
	None Fault = iota
	// LateResponse (late) writes, after the answer, a second copy of it: the
	// next request on that connection would receive the previous one's answer.
	LateResponse
	// HeadWithBody answers HEAD with a head declaring a Content-Length and
	// then that many bytes of body, which form a complete stray response.
	// Other methods are answered properly.
	HeadWithBody
	// NoContentWithBody answers with 204 No Content, the answer's
	// AnswerHeader, a Content-Length and that many bytes of body forming a
	// complete stray response. A 204 has no body whatever its headers say.
	NoContentWithBody
	// NotModifiedWithBody is NoContentWithBody with 304 Not Modified.
	NotModifiedWithBody
	// IdleTimeout (late) writes "408 Request Timeout" with "Connection:
	// close" and closes the connection, as servers do at their idle timeout.
	IdleTimeout
	// IdleClose (late) closes the connection (a FIN), as a server ending a
	// keep-alive connection silently does.
	IdleClose
	// IdleReset (late) resets the connection (an RST).
	IdleReset
	// TwoResponses writes the answer and a stray response in one write, so
	// that both arrive in one segment.
	TwoResponses
	// EarlyClose writes the answer's head declaring more body than it
	// sends, sends a part of it and closes the connection.
	EarlyClose
	// SplitHead writes the answer's head in three pieces, each sent once the
	// client's kernel acknowledged the previous one, so that the client reads
	// the head across several reads. The answer itself is proper.
	SplitHead
	// ChunkedTrailingGarbage answers with a chunked body followed, in the same
	// write, by a stray response.
	ChunkedTrailingGarbage
)

// Faults lists every Fault but None, for tests that try them all.
var Faults = []Fault{
	LateResponse, HeadWithBody, NoContentWithBody, NotModifiedWithBody,
	IdleTimeout, IdleClose, IdleReset, TwoResponses, EarlyClose, SplitHead,
	ChunkedTrailingGarbage,
}

var faultNames = [...]string{
	None:                   "none",
	LateResponse:           "late-response",
	HeadWithBody:           "head-with-body",
	NoContentWithBody:      "204-with-body",
	NotModifiedWithBody:    "304-with-body",
	IdleTimeout:            "idle-408",
	IdleClose:              "idle-close",
	IdleReset:              "idle-reset",
	TwoResponses:           "two-responses",
	EarlyClose:             "early-close",
	SplitHead:              "split-head",
	ChunkedTrailingGarbage: "chunked-trailing-garbage",
}

// String returns the fault's name, as used in test names.
func (f Fault) String() string {
	if f >= 0 && int(f) < len(faultNames) {
		return faultNames[f]
	}
	return "fault(" + strconv.Itoa(int(f)) + ")"
}

// IsLate reports whether f acts on an idle connection after its answer,
// when released.
func (f Fault) IsLate() bool {
	switch f {
	case LateResponse, IdleTimeout, IdleClose, IdleReset:
		return true
	}
	return false
}

// Status is the status code of the answer a client gets when f applies to
// its request with method: 204 and 304 for the faults that answer so, 200
// otherwise.
func (f Fault) Status() int {
	switch f {
	case NoContentWithBody:
		return 204
	case NotModifiedWithBody:
		return 304
	}
	return 200
}

// HasBody reports whether the answer a client gets to a request with
// method, when f applies, has a body: not for HEAD, 204 or 304.
func (f Fault) HasBody(method string) bool {
	return method != "HEAD" && f.Status() == 200
}

// ErrInvalidConfig is wrapped by the error of [Start] for a bad [Config].
var ErrInvalidConfig = errors.New("misbehave: invalid config")

// Config says how a [Server] misbehaves. The zero Config answers every
// request properly.
type Config struct {
	// Fault is how the server misbehaves. The zero value, None, answers
	// properly.
	Fault Fault

	// Every applies Fault to every Every-th answer only, counted over the
	// whole server from the first (with 3: answers 3, 6, 9...); the others
	// are proper. Zero or 1 means every answer; negative is invalid.
	Every int

	// LateAfter makes a late fault act on its own that long after its
	// answer, as well as on [Server.Release]. Zero means only on Release;
	// negative is invalid.
	LateAfter time.Duration
}

func (c Config) validate() error {
	switch {
	case c.Fault < None || int(c.Fault) >= len(faultNames):
		return fmt.Errorf("%w: unknown Fault %d", ErrInvalidConfig, int(c.Fault))
	case c.Every < 0:
		return fmt.Errorf("%w: Every must be ≥ 0, got %d", ErrInvalidConfig, c.Every)
	case c.LateAfter < 0:
		return fmt.Errorf("%w: LateAfter must be ≥ 0, got %v", ErrInvalidConfig, c.LateAfter)
	}
	return nil
}

// ErrWrongAnswer is wrapped by the error of [CheckAnswer] for a response
// that is not the answer to the request it was checked against: another
// request's answer, or a stray response.
var ErrWrongAnswer = errors.New("misbehave: not the answer to this request")

// CheckAnswer reads resp's body, closes it, and returns nil if resp is an
// answer of this package's servers to the request with method and target:
// AnswerHeader names them, the status is 200, 204 or 304, and the body is
// [Answer] of them for a 200 to a method other than HEAD, empty otherwise.
// It returns an error wrapping [ErrWrongAnswer] if resp answers something
// else, or the error of reading the body (a fault such as EarlyClose cuts
// it short).
func CheckAnswer(resp *http.Response, method, target string) error {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("misbehave: reading the answer to %s %s: %w", method, target, err)
	}
	want := ""
	if resp.StatusCode == http.StatusOK && method != http.MethodHead {
		want = Answer(method, target)
	}
	switch got := resp.Header.Get(AnswerHeader); {
	case got != method+" "+target:
		return fmt.Errorf("%w: %s %s got status %d with %s %q, body %q", ErrWrongAnswer, method, target, resp.StatusCode, AnswerHeader, got, body)
	case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified:
		return fmt.Errorf("%w: %s %s got status %d", ErrWrongAnswer, method, target, resp.StatusCode)
	case string(body) != want:
		return fmt.Errorf("%w: %s %s got status %d with body %q, want %q", ErrWrongAnswer, method, target, resp.StatusCode, body, want)
	}
	return nil
}
