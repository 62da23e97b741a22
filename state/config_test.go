package state

import (
	"strings"
	"testing"
)

func TestPlanMemory(t *testing.T) {
	for _, budget := range []int64{minMemoryBytes, 64 << 20, 1 << 30, 6 << 30, 64 << 30} {
		p := planMemory(budget)
		used := int64(p.memTableSize)*int64(p.memTableCount) + p.blockCacheSize
		if used > budget || p.memTableCount < 2 || p.memTableSize < 4<<20 || p.memTableSize > 256<<20 {
			t.Errorf("budget %d: plan %+v uses %d", budget, p, used)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{MemoryBytes: 1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "MemoryBytes 1") || !strings.Contains(err.Error(), "Dir is empty") {
		t.Fatalf("Validate = %v, want both problems", err)
	}
	if err := (Config{}).withDefaults().Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func TestRestoreConfigValidate(t *testing.T) {
	err := RestoreConfig{FetchMaxBytes: 10, BatchBytes: -1}.withDefaults(4 << 20).Validate()
	for _, want := range []string{"Client options are empty", "FetchMaxBytes 10", "FetchMaxPartitionBytes 10", "BatchBytes -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to mention %q", err, want)
		}
	}
}
