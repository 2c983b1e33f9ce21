package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/seed-a07d1050/portcullis/internal/siege"
)

// Meta is what run.sh records about the whole run: versions, machine, command.
type Meta map[string]string

// RunMeta is what run.sh records around one siege run.
type RunMeta struct {
	Proxy    string `json:"proxy"`
	Scenario string `json:"scenario"`
	Round    int    `json:"round"`
	Exit     int    `json:"exit"`
	// CPUTicks is the proxy's user+system CPU over the whole siege process
	// (warm-up, window and teardown), in 1/100 s, all its processes summed.
	CPUTicks int64 `json:"cpu_ticks"`
	WallNS   int64 `json:"wall_ns"`
	// MachineBusyTicks is the CPU every core of the machine spent busy over
	// the same span; BackendTicks and SiegeTicks are the backend's and the
	// load generator's part of it. What remains is other people's work.
	MachineBusyTicks int64 `json:"machine_busy_ticks"`
	BackendTicks     int64 `json:"backend_ticks"`
	SiegeTicks       int64 `json:"siege_ticks"`
}

// OtherCores is how many cores, on average over the run, went to processes
// other than the proxy, the backend and the load generator: the noise.
func (m RunMeta) OtherCores() float64 {
	other := m.MachineBusyTicks - m.CPUTicks - m.BackendTicks - m.SiegeTicks
	return max(0, float64(other)/100/seconds(m.WallNS))
}

// Run is one siege run: what run.sh measured and siege's report (nil when
// siege wrote none, such as when it could not start).
type Run struct {
	RunMeta
	Report *siege.Report `json:"report,omitempty"`
	// Err holds siege's stderr when it exited with an error.
	Err string `json:"error,omitempty"`
}

// CPUSeconds is the proxy CPU of the run in seconds.
func (r Run) CPUSeconds() float64 { return float64(r.CPUTicks) / 100 }

func loadRuns(dir string) (Meta, []Run, error) {
	var meta Meta
	if err := readJSON(filepath.Join(dir, "meta.json"), &meta); err != nil {
		return nil, nil, err
	}
	metas, err := filepath.Glob(filepath.Join(dir, "*.meta.json"))
	if err != nil {
		return nil, nil, err
	}
	if len(metas) == 0 {
		return nil, nil, fmt.Errorf("no *.meta.json runs in %s", dir)
	}
	runs := make([]Run, 0, len(metas))
	for _, m := range metas {
		r, err := loadRun(strings.TrimSuffix(m, ".meta.json"))
		if err != nil {
			return nil, nil, err
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool {
		a, b := runs[i], runs[j]
		if a.Round != b.Round {
			return a.Round < b.Round
		}
		if a.Proxy != b.Proxy {
			return a.Proxy < b.Proxy
		}
		return a.Scenario < b.Scenario
	})
	return meta, runs, nil
}

func loadRun(base string) (Run, error) {
	var r Run
	if err := readJSON(base+".meta.json", &r.RunMeta); err != nil {
		return r, err
	}
	var rep siege.Report
	switch err := readJSON(base+".json", &rep); {
	case err == nil:
		r.Report = &rep
	case errors.Is(err, errEmpty):
	default:
		return r, err
	}
	if r.Exit != 0 {
		b, _ := os.ReadFile(base + ".err")
		r.Err = strings.TrimSpace(string(b))
	}
	return r, nil
}

var errEmpty = errors.New("empty file")

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return fmt.Errorf("%s: %w", path, errEmpty)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
