package grpclimit_test

import (
	"reflect"
	"testing"

	"github.com/seed-a07d1050/portcullis/grpclimit"
	"github.com/seed-a07d1050/portcullis/internal/doctest"
)

func TestConfigFieldsSayWhatZeroMeans(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "config.go", reflect.TypeFor[grpclimit.Config]())
}
