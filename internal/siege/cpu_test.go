package siege

import (
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	tail := " S 1 2 3 4 5 6 7 8 9 10 %s %s 13 14 15 16 17 18 19 20\n"
	line := func(name, utime, stime string) string {
		return "42 (" + name + ")" + strings.Replace(strings.Replace(tail, "%s", utime, 1), "%s", stime, 1)
	}
	tests := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr bool
	}{
		{name: "plain", in: line("portcullis", "150", "50"), want: 2 * time.Second},
		{name: "name with spaces and parens", in: line("a) (b c", "1", "2"), want: 30 * time.Millisecond},
		{name: "zero", in: line("x", "0", "0"), want: 0},
		{name: "no name", in: "42 x S 1 2", wantErr: true},
		{name: "too few fields", in: "42 (x) S 1 2 3", wantErr: true},
		{name: "not a number", in: line("x", "1a", "0"), wantErr: true},
		{name: "negative", in: line("x", "-1", "0"), wantErr: true},
		{name: "overflow", in: line("x", "99999999999999999999", "0"), wantErr: true},
		{name: "empty", in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseProcStat = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestProcessCPUSelf(t *testing.T) {
	before, err := processCPU("self")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		now, err := processCPU("self")
		if err != nil {
			t.Fatal(err)
		}
		if now > before {
			return // spinning here used CPU, and it showed
		}
	}
	t.Error("2 s of spinning did not raise this process's CPU time")
}

func TestProcessCPUMissing(t *testing.T) {
	if _, err := processCPU("999999999"); err == nil || !strings.HasPrefix(err.Error(), "siege: ") {
		t.Errorf("processCPU(no such pid) = %v, want a siege: error", err)
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("42 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14"))
	f.Add([]byte("1 (a)) b) R 0 0 0 0 0 0 0 0 0 0 5 5"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseProcStat(b)
		if err == nil && d < 0 {
			t.Fatalf("negative CPU time %v from %q", d, b)
		}
	})
}
