package connlimit

import (
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/doctest"
)

// Every Config field says what its zero value means; a field added without
// that fails here.
func TestConfigFieldsDocumentZero(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "config.go", reflect.TypeFor[Config]())
}

// NewListener applies defaults on its own copy and leaves the caller's
// Config as it was.
func TestNewListenerDoesNotMutateConfig(t *testing.T) {
	cfg := Config{Levels: []Level{{IPv4Bits: 24, Max: 9}}}
	l := newTestListener(t, nil, cfg)
	if cfg.Permits != 0 || cfg.Logger != nil || cfg.Name != "" {
		t.Fatalf("caller's Config changed: %+v", cfg)
	}
	cfg.Levels[0].Max = 1
	if l.s.Levels[0].Max != 9 || l.s.Permits != DefaultPermits || l.s.ProxyHeaderTimeout != DefaultProxyHeaderTimeout {
		t.Fatalf("listener settings = %+v", l.s)
	}
}
