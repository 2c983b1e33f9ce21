package redisstore_test

import (
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/doctest"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// Every Config, RateConfig and ClientOptions field says what its zero value means.
func TestConfigFieldsDocumentZero(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "config.go", reflect.TypeFor[redisstore.Config]())
	doctest.ZeroValuesDocumented(t, "client.go", reflect.TypeFor[redisstore.ClientOptions]())
	doctest.ZeroValuesDocumented(t, "rateconfig.go", reflect.TypeFor[redisstore.RateConfig]())
}
