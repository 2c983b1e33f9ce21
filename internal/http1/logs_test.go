package http1

import (
	"io"
	"log"
	"log/slog"
)

var (
	discardLog  = log.New(io.Discard, "", 0)
	discardSlog = slog.New(slog.DiscardHandler)
)
