package daemon

import (
	"net/http"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// SetTestHooks makes binding a listener and building a route table fail
// when the given functions say so, for the tests of failed reloads; nil
// removes a hook. The returned function restores the hooks as they were.
func SetTestHooks(bind func(config.Listener) error, buildTable func(listener string) error) (restore func()) {
	oldBind, oldBuild := testHookBind, testHookBuildTable
	testHookBind, testHookBuildTable = bind, buildTable
	return func() { testHookBind, testHookBuildTable = oldBind, oldBuild }
}

// HTTP1ServerOf returns the HTTP/1.x server that serves the listener
// named name, as its http1_server setting names it: "eventloop" or "net/http", or the
// internal part set in Go, "lean" or "fast";
// "" when the listener is not an http or https listener, or does not
// exist.
func HTTP1ServerOf(s *Server, name string) config.HTTP1Server {
	for _, f := range s.frontList() {
		if f.cfg.Name == name {
			return f.ln.HTTP1Server()
		}
	}
	return ""
}

// SetReverseProxy makes the routes of the servers started from now on send
// their requests through httputil.ReverseProxy (on) or the relay (off),
// for the tests and benchmarks that compare the two. The returned function
// restores the setting as it was.
func SetReverseProxy(on bool) (restore func()) {
	old := testHookReverseProxy
	testHookReverseProxy = on
	return func() { testHookReverseProxy = old }
}

// SetRequestMetrics turns the request metrics (portcullis_http_*,
// portcullis_upstream_response_duration_seconds, upstream errors) of the
// route tables built from now on off or on, for the benchmark that
// measures their cost. The returned function restores the setting.
func SetRequestMetrics(on bool) (restore func()) {
	old := testHookNoRequestMetrics
	testHookNoRequestMetrics = !on
	return func() { testHookNoRequestMetrics = old }
}

// SetLoopPanicHook has the event loops' exchanges call hook at their
// steps ("begin", "reply"; see testHookLoopPanic). The returned function
// removes it.
func SetLoopPanicHook(hook func(step string, r *http.Request)) (restore func()) {
	old := testHookLoopPanic
	testHookLoopPanic = hook
	return func() { testHookLoopPanic = old }
}

// LoopConnsOf returns the client connections the event loops of the
// listener named name hold now, and how many they took since it started:
// 0, 0 without loops.
func LoopConnsOf(s *Server, name string) (held int, adopted uint64) {
	for _, f := range s.frontList() {
		if loop := f.ln.Loops(); f.cfg.Name == name && loop != nil {
			return loop.Conns(), loop.Adopted()
		}
	}
	return 0, 0
}
