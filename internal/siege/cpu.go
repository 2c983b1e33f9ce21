package siege

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat: USER_HZ, 100
// on every Linux configuration Go supports.
const clockTick = 10 * time.Millisecond

// processCPU returns the user plus system CPU time process pid has used
// ("self" for this process).
func processCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, fmt.Errorf("siege: reading CPU time of %s: %w", pid, err)
	}
	return parseProcStat(b)
}

// parseProcStat reads utime and stime (fields 14 and 15) from the contents of
// /proc/PID/stat. The command name (field 2) may hold spaces and parentheses,
// so fields are counted from the last ')'.
func parseProcStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("siege: /proc stat without a command name: %.60q", b)
	}
	fields := bytes.Fields(b[i+1:]) // fields[0] is field 3, the state
	if len(fields) < 13 {
		return 0, fmt.Errorf("siege: /proc stat has %d fields after the name, want ≥ 13", len(fields))
	}
	var total time.Duration
	for _, f := range fields[11:13] {
		ticks, err := strconv.ParseUint(string(f), 10, 63)
		if err != nil || ticks > uint64(1<<61/clockTick) {
			return 0, fmt.Errorf("siege: /proc stat CPU field %.30q is not a tick count", f)
		}
		total += time.Duration(ticks) * clockTick
	}
	return total, nil
}
