package daemon

import "github.com/seed-a07d1050/portcullis/internal/config"

// logWarnings logs at WARN, at start and on every reload, each warning of
// the effective configuration cfg (config.Listener.Warnings): a forward
// listener bound beyond loopback without auth or allow_file, an
// interception that does not verify its targets. Each names its listener
// and the setting that opens or closes what it is about.
func (s *Server) logWarnings(cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		s.log.Warn(w.Message, "listener", w.Listener, "setting", w.Setting)
	}
}
