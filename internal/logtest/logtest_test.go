package logtest_test

import (
	"bytes"
	"log"
	"log/slog"
	"slices"
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
