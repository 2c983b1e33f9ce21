package cidrlist_test

import (
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/cidrlist"
)

// FuzzParseCIDRList feeds arbitrary files to Parse: it never panics, and
// every entry of an accepted file is denied by a deny list of that file
// and accepted by an allow list of it.
func FuzzParseCIDRList(f *testing.F) {
	for _, s := range []string{
		"10.0.0.0/8\n192.0.2.7\n# comment\n\n2001:db8::/32 # x\n",
		"::ffff:10.0.0.0/104\n::ffff:1.2.3.4\n",
		"\ufeff0.0.0.0/0\r\n::/0\r\n",
		"10.1.2.3/8\n",
		"fe80::1%eth0\n",
		"1.2.3.4 5.6.7.8",
		"#\n#\n#",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := cidrlist.Parse("fuzz", data)
		if err != nil {
			if ps != nil {
				t.Fatalf("entries %v returned with error %v", ps, err)
			}
			return
		}
		deny, allow := cidrlist.New(ps, nil), cidrlist.New(nil, ps)
		for _, p := range ps {
			if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
				t.Fatalf("entry %v is not a canonical unmapped prefix", p)
			}
			if v := deny.Check(p.Addr()); v != cidrlist.Denied {
				t.Fatalf("deny list %v: Check(%s) = %v", ps, p.Addr(), v)
			}
			if v := allow.Check(p.Addr()); v != cidrlist.Accept {
				t.Fatalf("allow list %v: Check(%s) = %v", ps, p.Addr(), v)
			}
		}
	})
}
