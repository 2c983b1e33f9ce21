package forward_test

import (
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/doctest"
	"github.com/seed-a07d1050/portcullis/internal/forward"
)

func TestConfigZeroValuesDocumented(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "proxy.go", reflect.TypeFor[forward.Config]())
	doctest.ZeroValuesDocumented(t, "policy.go", reflect.TypeFor[forward.PolicyConfig]())
	doctest.ZeroValuesDocumented(t, "dial.go", reflect.TypeFor[forward.DialerConfig]())
}
