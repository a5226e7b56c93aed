package app

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
)

// GCPercentDefault is the garbage collector's target (GOGC) the process
// runs with when the environment does not set GOGC: four times Go's own
// default heap growth between collections. At thousands of short tasks a
// second the process allocates some 8 KB a task, and on a machine it shares
// with its database every core the collector takes is one PostgreSQL lacks:
// from 200 to 400 the collector's CPU per noop task fell from about 4.7 µs
// to 1.8 µs and the burn-down on PostgreSQL rose 6% (200k tasks, the mean of
// 8 rounds alternated with the previous build), for a peak of 205 MB against
// 135 MB. The memory limit below keeps a large heap from growing fourfold.
const GCPercentDefault = 400

// gcMemoryShare is the part of the memory the process may use (its cgroup's
// limit, else the machine's) that it sets as the collector's soft limit
// (GOMEMLIMIT) when the environment sets none: past it the collector works
// harder instead of letting GOGC grow the heap. With GOGC at 400 the heap
// reaches five times what is live: a live heap under a fifth of the limit,
// the usual case, never meets it.
const gcMemoryShare = 2

// TuneGC sets the collector's target (GCPercentDefault) and soft memory
// limit (gcMemoryLimit) where the environment sets neither GOGC nor
// GOMEMLIMIT: what the environment says wins.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercentDefault)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if limit := GCMemoryLimit(os.ReadFile); limit > 0 {
			debug.SetMemoryLimit(limit)
		}
	}
}

// GCMemoryLimit is the soft memory limit for a process that may use the
// memory read tells (the cgroup's limit, v2 or v1, if lower than the
// machine's memory, else the machine's): 1/gcMemoryShare of it, or 0 when
// none can be read.
func GCMemoryLimit(read func(string) ([]byte, error)) int64 {
	total := memTotal(read)
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := read(path)
		if err != nil {
			continue
		}
		// "max" (v2) and v1's huge number for none are no limit.
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	return total / gcMemoryShare
}

// memTotal is MemTotal of /proc/meminfo in bytes, 0 if it cannot be read.
func memTotal(read func(string) ([]byte, error)) int64 {
	b, err := read("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// gcMemoryLimitInEffect is the collector's soft memory limit in effect (GOMEMLIMIT)
// in bytes; -1: none.
func gcMemoryLimitInEffect() int64 {
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		return limit
	}
	return -1
}

// gcPercentInEffect is the garbage collector's target in effect (GOGC; -1: off).
func gcPercentInEffect() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return int64(s[0].Value.Uint64()) // off reads as the largest uint64: -1
}
