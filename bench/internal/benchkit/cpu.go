package benchkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat times; it is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// CPUTime reads utime+stime of /proc/<id>/stat; id is a process ID or
// "self".
func CPUTime(id string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + id + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// fields are counted after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%s/stat: no ')'", id)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%s/stat: %d fields", id, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/%s/stat: %w", id, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}
