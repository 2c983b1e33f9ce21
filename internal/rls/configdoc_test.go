package rls

import (
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/doctest"
)

// Every field of the options says what its zero value means.
func TestOptionsDocumentZero(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "server.go", reflect.TypeFor[ServerOptions]())
	doctest.ZeroValuesDocumented(t, "server.go", reflect.TypeFor[TLSFiles]())
}

// ServerTLS refuses half a TLS configuration.
func TestServerTLSHalf(t *testing.T) {
	for _, f := range []TLSFiles{{CertFile: "c"}, {KeyFile: "k"}, {ClientCAFile: "ca"}} {
		if _, err := ServerTLS(f); err == nil {
			t.Errorf("%+v accepted", f)
		}
	}
	if c, err := ServerTLS(TLSFiles{}); c != nil || err != nil {
		t.Errorf("no files: %v %v, want no TLS", c, err)
	}
}
