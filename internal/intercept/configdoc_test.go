package intercept_test

import (
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/doctest"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

func TestConfigZeroValuesDocumented(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "interceptor.go", reflect.TypeFor[intercept.Config]())
	doctest.ZeroValuesDocumented(t, "leaves.go", reflect.TypeFor[intercept.LeavesConfig]())
	doctest.ZeroValuesDocumented(t, "upstream.go", reflect.TypeFor[intercept.UpstreamConfig]())
	doctest.ZeroValuesDocumented(t, "create.go", reflect.TypeFor[intercept.CAOptions]())
}
