package state

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// fallbackMemory is assumed when neither a cgroup limit nor /proc/meminfo can be read.
const fallbackMemory = 4 << 30

// systemMemory returns the memory the process may use: the cgroup limit (v2, then v1) when
// one is set, else physical memory, whichever is smaller.
func systemMemory() int64 {
	total := physicalMemory()
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if limit, ok := readLimit(path); ok && limit < total {
			total = limit
		}
	}
	return total
}

func readLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	// cgroup v1 reports "no limit" as a huge page-aligned number.
	if err != nil || v <= 0 || v >= 1<<60 {
		return 0, false
	}
	return v, true
}

func physicalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return fallbackMemory
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return fallbackMemory
}
