package connlimit

import (
	"reflect"
	"strings"
	"testing"
)

// A refusal reason is spelled in logs as the JSON name of its Stats.Refused
// field, which is also its metric label: one name per reason everywhere.
func TestReasonNamesAreRefusedFieldNames(t *testing.T) {
	typ := reflect.TypeFor[Refused]()
	if typ.NumField() != int(numReasons)-1 {
		t.Fatalf("Refused has %d fields for %d reasons", typ.NumField(), numReasons-1)
	}
	for r := reasonClientCap; r < numReasons; r++ {
		tag, _, _ := strings.Cut(typ.Field(int(r)-1).Tag.Get("json"), ",")
		if r.String() != tag {
			t.Errorf("reason %d is logged as %q, counted as %q (Refused.%s)", r, r.String(), tag, typ.Field(int(r)-1).Name)
		}
	}
}
