package bench

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// cpuMeter reads what the burn-down costs in CPU: this process's (getrusage,
// and the collector's share of it from runtime/metrics) and, when the
// database is a PostgreSQL server on this machine, PostgreSQL's: every
// process named postgres (another cluster's on the machine too), those still
// running and, through the postmasters' counters of their ended children,
// those that ended (an autovacuum worker, a backend that closed). A job
// system on 2 cores shares them with its database: a rate tells what a run
// got from a shared machine, the CPU per task where the cores went, and
// varies less with what else runs.
type cpuMeter struct {
	self bool // the system tells this process's CPU time
	pg   bool // the server is on this machine and /proc tells its CPU
}

// cpuSample is what the CPU clocks read at one instant.
type cpuSample struct {
	at           time.Time
	self, gc, pg time.Duration
}

// newCPUMeter returns a meter; pg is whether the database is a PostgreSQL
// server this machine's /proc can see.
func newCPUMeter(postgres bool, dsn string) cpuMeter {
	_, self := processCPU()
	m := cpuMeter{self: self}
	if postgres && runtime.GOOS == "linux" && localDSN(dsn) {
		_, ok := postgresCPU()
		m.pg = ok
	}
	return m
}

func (m cpuMeter) read() cpuSample {
	s := cpuSample{at: time.Now()}
	s.self, _ = processCPU()
	gc := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	if metrics.Read(gc); gc[0].Value.Kind() == metrics.KindFloat64 {
		s.gc = time.Duration(gc[0].Value.Float64() * float64(time.Second))
	}
	if m.pg {
		s.pg, _ = postgresCPU()
	}
	return s
}

// report is the line the bench prints for the CPU spent from a to b on
// tasks tasks, empty where the system does not tell the process's.
func (m cpuMeter) report(a, b cpuSample, tasks int) string {
	if !m.self {
		return ""
	}
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.1f µs", float64(d.Nanoseconds())/1e3/float64(tasks))
	}
	wall := b.at.Sub(a.at)
	used := b.self - a.self
	line := "cpu per task: taskgraph " + per(used) + " (garbage collection " + per(b.gc-a.gc) + ")"
	if m.pg {
		line += ", postgres " + per(b.pg-a.pg) + " (every postgres process on this machine)"
		used += b.pg - a.pg
	}
	return line + fmt.Sprintf("; %.2f of %d cores busy with them", used.Seconds()/wall.Seconds(), runtime.NumCPU())
}

// localDSN reports whether a PostgreSQL URL or key=value DSN names a server
// on this machine: a loopback address, localhost, or a Unix socket.
func localDSN(dsn string) bool {
	host := ""
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		host = u.Hostname()
		if h := u.Query().Get("host"); h != "" {
			host = h
		}
	} else {
		for _, kv := range strings.Fields(dsn) {
			if v, ok := strings.CutPrefix(kv, "host="); ok {
				host = v
			}
		}
	}
	if host == "" || strings.HasPrefix(host, "/") || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// postgresCPU sums the CPU time of this machine's processes named postgres,
// and that of the ended children their postmasters waited for. It reports
// false when there is none to read.
func postgresCPU() (time.Duration, bool) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	type proc struct {
		ppid             string
		ticks, reapTicks int64
	}
	procs := map[string]proc{}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // ended since the listing
		}
		s := string(b)
		lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if lp < 0 || rp < lp || s[lp+1:rp] != "postgres" {
			continue
		}
		// After the command: state ppid ... utime(14) stime(15)
		// cutime(16) cstime(17), counting fields from 1 at the pid.
		f := strings.Fields(s[rp+1:])
		if len(f) < 15 {
			continue
		}
		num := func(i int) int64 { v, _ := strconv.ParseInt(f[i-3], 10, 64); return v }
		procs[filepath.Base(filepath.Dir(path))] = proc{ppid: f[1], ticks: num(14) + num(15), reapTicks: num(16) + num(17)}
	}
	if len(procs) == 0 {
		return 0, false
	}
	var ticks int64
	for _, p := range procs {
		ticks += p.ticks
		if _, child := procs[p.ppid]; !child {
			// A postmaster: its children that ended are counted here.
			ticks += p.reapTicks
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks, true
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// architecture Go runs on.
const clockTicks = 100
