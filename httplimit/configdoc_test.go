package httplimit_test

import (
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/doctest"
)

// Every Config field says what its zero value means.
func TestConfigFieldsDocumentZero(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "config.go", reflect.TypeFor[httplimit.Config]())
}
