package proccpu

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
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
		{name: "user only", in: line("portcullis", "7", "0"), want: 70 * time.Millisecond},
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
			got, err := Parse([]byte(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("Parse = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
			times, err := ParseTimes([]byte(tc.in))
			if (err != nil) != tc.wantErr || times.User+times.System != tc.want {
				t.Errorf("ParseTimes = %+v, %v; want a sum of %v, error %v", times, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseTimesKeepsUserAndSystemApart(t *testing.T) {
	got, err := ParseTimes([]byte("42 (p) S 1 2 3 4 5 6 7 8 9 10 150 50 13 14\n"))
	want := Times{User: 1500 * time.Millisecond, System: 500 * time.Millisecond}
	if err != nil || got != want {
		t.Errorf("ParseTimes = %+v, %v; want %+v", got, err, want)
	}
}

func TestOfSelf(t *testing.T) {
	before, err := Of("self")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		now, err := Of("self")
		if err != nil {
			t.Fatal(err)
		}
		if now > before {
			return // spinning here used CPU, and it showed
		}
	}
	t.Error("2 s of spinning did not raise this process's CPU time")
}

func TestOfMissing(t *testing.T) {
	if _, err := Of("999999999"); err == nil || !strings.HasPrefix(err.Error(), "proccpu: ") {
		t.Errorf("Of(no such pid) = %v, want a proccpu: error", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("42 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14"))
	f.Add([]byte("1 (a)) b) R 0 0 0 0 0 0 0 0 0 0 5 5"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse(b)
		if err == nil && d < 0 {
			t.Fatalf("negative CPU time %v from %q", d, b)
		}
	})
}

// A child's CPU time counts in its parent's: this test process spins in a
// child (itself, run again) and WithChildren of this process grows by it.
func TestWithChildrenCountsAChild(t *testing.T) {
	if os.Getenv("PROCCPU_SPIN") != "" {
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestWithChildrenCountsAChild$")
	cmd.Env = append(os.Environ(), "PROCCPU_SPIN=1")
	self, err := Of("self")
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		child, err := Of(strconv.Itoa(cmd.Process.Pid))
		if err != nil || child == 0 {
			continue // not yet, or it has ended and will fail the loop out
		}
		all, err := WithChildren(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if all < self+child {
			t.Fatalf("WithChildren = %v, less than this process (%v) and its spinning child (%v)", all, self, child)
		}
		return
	}
	t.Fatal("the spinning child never showed any CPU time")
}
