// Package proccpu reads how much CPU time a process has used, from Linux's
// /proc/PID/stat, for the benchmarks and siege reports that compare
// processes by CPU per request.
package proccpu

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

// Of returns the user plus system CPU time process pid has used ("self"
// for this process).
func Of(pid string) (time.Duration, error) {
	t, err := timesOf(pid)
	return t.User + t.System, err
}

// timesOf reads the CPU time of process pid ("self" for this process).
func timesOf(pid string) (Times, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return Times{}, fmt.Errorf("proccpu: reading CPU time of %s: %w", pid, err)
	}
	return ParseTimes(b)
}

// WithChildren returns the CPU time of process pid and of its direct
// children (nginx's workers, say), those alive now.
func WithChildren(pid int) (time.Duration, error) {
	t, err := TimesWithChildren(pid)
	return t.User + t.System, err
}

// Times is a process's CPU time split by where it was spent: in its own
// code (User) and in the kernel on its behalf (System), which for a
// proxy is mostly its system calls.
type Times struct {
	User, System time.Duration
}

// TimesWithChildren is WithChildren split into user and system time.
func TimesWithChildren(pid int) (Times, error) {
	total, err := timesOf(strconv.Itoa(pid))
	if err != nil {
		return Times{}, err
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == strconv.Itoa(pid) {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil || parent(b) != pid {
			continue // gone, or not a child
		}
		if t, err := ParseTimes(b); err == nil {
			total.User += t.User
			total.System += t.System
		}
	}
	return total, nil
}

// Parse reads utime and stime (fields 14 and 15) from the contents of
// /proc/PID/stat and returns their sum. The command name (field 2) may
// hold spaces and parentheses, so fields are counted from the last ')'.
func Parse(b []byte) (time.Duration, error) {
	t, err := ParseTimes(b)
	return t.User + t.System, err
}

// ParseTimes is Parse with utime and stime apart.
func ParseTimes(b []byte) (Times, error) {
	fields, err := afterName(b)
	if err != nil {
		return Times{}, err
	}
	if len(fields) < 13 {
		return Times{}, fmt.Errorf("proccpu: /proc stat has %d fields after the name, want ≥ 13", len(fields))
	}
	var ticks [2]time.Duration
	for i, f := range fields[11:13] {
		n, err := strconv.ParseUint(string(f), 10, 63)
		if err != nil || n > uint64(1<<61/clockTick) {
			return Times{}, fmt.Errorf("proccpu: /proc stat CPU field %.30q is not a tick count", f)
		}
		ticks[i] = time.Duration(n) * clockTick
	}
	return Times{User: ticks[0], System: ticks[1]}, nil
}

// parent returns the parent PID (field 4) of a /proc/PID/stat, or -1.
func parent(b []byte) int {
	fields, err := afterName(b)
	if err != nil || len(fields) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return -1
	}
	return ppid
}

// afterName returns the fields of a /proc/PID/stat after the command
// name: fields[0] is field 3, the state.
func afterName(b []byte) ([][]byte, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("proccpu: /proc stat without a command name: %.60q", b)
	}
	return bytes.Fields(b[i+1:]), nil
}
