package logtest_test

import (
	"bytes"
	"log"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/logtest"
)

func TestCaptureDefaultRecordsAndRestores(t *testing.T) {
	var before bytes.Buffer
	out, flags := log.Writer(), log.Flags()
	log.SetOutput(&before)
	defer log.SetOutput(out)
	prev := slog.Default()

	t.Run("capture", func(t *testing.T) {
		r := logtest.CaptureDefault(t)
		slog.Warn("to the default")
		log.Print("through the log package")
		want := []string{"WARN to the default", "INFO through the log package"}
		if got := r.Lines(); !slices.Equal(got, want) {
			t.Errorf("recorded %q, want %q", got, want)
		}
	})
	if slog.Default() != prev || log.Flags() != flags || log.Writer() != &before {
		t.Fatal("the previous default logger, log output or log flags were not put back")
	}
	log.Print("after")
	if !bytes.Contains(before.Bytes(), []byte("after")) {
		t.Errorf("the log package writes %q to its old output after the test, want \"after\"", before.String())
	}
}

// A Buffer takes lines from many goroutines at once while it is read, and
// keeps each line whole (run with -race).
func TestBufferWrittenWhileRead(t *testing.T) {
	var b logtest.Buffer
	logger := slog.New(slog.NewTextHandler(&b, nil))
	done := make(chan struct{})
	for i := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := range 100 {
				logger.Info("line", "writer", i, "n", j)
			}
		}()
	}
	for range 4 {
		_ = b.String()
		<-done
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	for _, l := range lines {
		if !strings.Contains(l, "msg=line writer=") || !strings.Contains(l, " n=") {
			t.Fatalf("a line cut or mixed: %q", l)
		}
	}
}
