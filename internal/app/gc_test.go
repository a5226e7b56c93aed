package app

import (
	"io/fs"
	"testing"
)

// TestGCMemoryLimit: the soft memory limit is a share of what the process
// may use: its cgroup's limit when lower than the machine's memory, else
// the machine's; none when nothing tells.
func TestGCMemoryLimit(t *testing.T) {
	t.Parallel()
	const meminfo = "MemTotal:       24683652 kB\nMemFree:         1000000 kB\n"
	const machine = 24683652 << 10
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"TheMachinesWhenNoCgroupLimits", map[string]string{"/proc/meminfo": meminfo}, machine / gcMemoryShare},
		{"CgroupV2WithoutALimit", map[string]string{"/proc/meminfo": meminfo, "/sys/fs/cgroup/memory.max": "max\n"}, machine / gcMemoryShare},
		{"CgroupV2Limit", map[string]string{"/proc/meminfo": meminfo, "/sys/fs/cgroup/memory.max": "2147483648\n"}, 2 << 30 / gcMemoryShare},
		{"CgroupV1Limit", map[string]string{"/proc/meminfo": meminfo, "/sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n"}, 1 << 30 / gcMemoryShare},
		{"CgroupV1WithoutALimit", map[string]string{"/proc/meminfo": meminfo, "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, machine / gcMemoryShare},
		{"ACgroupLimitWithoutMeminfo", map[string]string{"/sys/fs/cgroup/memory.max": "4294967296"}, 4 << 30 / gcMemoryShare},
		{"NothingToRead", nil, 0},
		{"GarbledMeminfo", map[string]string{"/proc/meminfo": "MemTotal: lots\n"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := func(path string) ([]byte, error) {
				if s, ok := tc.files[path]; ok {
					return []byte(s), nil
				}
				return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
			}
			if got := GCMemoryLimit(read); got != tc.want {
				t.Fatalf("limit %d, want %d", got, tc.want)
			}
		})
	}
}
