package proxyauth_test

import (
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/doctest"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
)

func TestConfigZeroValuesDocumented(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "auth.go", reflect.TypeFor[proxyauth.Config]())
	doctest.ZeroValuesDocumented(t, "failures.go", reflect.TypeFor[proxyauth.FailureConfig]())
}
