package limit_test

import (
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/doctest"
	"github.com/seed-a07d1050/portcullis/limit"
)

// Every Config field says what its zero value means.
func TestConfigFieldsDocumentZero(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "config.go", reflect.TypeFor[limit.Config[string]]())
}

// Every Policy field says what its zero value means: the adapters embed it
// and point their readers here.
func TestPolicyFieldsDocumentZero(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "policy.go", reflect.TypeFor[limit.Policy[string]]())
}
