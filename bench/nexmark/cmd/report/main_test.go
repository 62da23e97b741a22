package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `{"kind":"machine","data":{"cores":2}}
{"kind":"generator","system":"nexmark-gen","data":{"events":1000}}
{"kind":"ceiling","system":"franz-go","cpuSeconds":0.5,"peakRssKB":10240,"data":{"records":1000,"seconds":0.001,"recordsPerSec":1000000}}
{"kind":"run","system":"kstreams","query":"q5","guarantee":"at_least_once","cpuSeconds":2,"peakRssKB":512000,"data":{"records":920,"seconds":0.01,"recordsPerSec":92000,"outputs":3}}
{"kind":"restore","system":"kstreams","query":"q5","guarantee":"at_least_once","peakRssKB":400000,"data":{"records":100,"seconds":1,"recordsPerSec":100}}
{"kind":"run","system":"tarn","query":"q5","guarantee":"at_least_once","cpuSeconds":1,"peakRssKB":128000,"data":{"records":920,"seconds":0.005,"recordsPerSec":184000,"outputs":3}}
{"kind":"restore","system":"tarn","query":"q5","guarantee":"at_least_once","peakRssKB":100000,"data":{"records":100,"seconds":0.25,"recordsPerSec":400}}
{"kind":"compare","query":"q5","guarantee":"at_least_once","data":{"query":"q5","kind":"table","equal":true}}
{"kind":"run","system":"kstreams","query":"q0","guarantee":"at_least_once","cpuSeconds":1,"peakRssKB":256000,"data":{"records":920,"seconds":0.002,"recordsPerSec":460000,"outputs":920}}
`

func TestReport(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "runs.jsonl")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	pngPath := filepath.Join(dir, "chart.png")
	if err := run(in, filepath.Join(dir, "results.json"), pngPath, &table); err != nil {
		t.Fatal(err)
	}
	lines, err := readLines(in)
	if err != nil {
		t.Fatal(err)
	}
	res, err := build(lines)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Rows[0].Query != "q0" || res.Rows[1].Query != "q5" {
		t.Fatalf("rows %+v, want q0 then q5", res.Rows)
	}
	q5 := res.Rows[1]
	for name, got := range map[string]*float64{"ratio": q5.Ratio, "restore": q5.RestoreRatio, "rss": q5.RSSRatio, "ceiling": q5.TarnOfCeiling} {
		want := map[string]float64{"ratio": 2, "restore": 4, "rss": 0.25, "ceiling": 0.184}[name]
		if got == nil || *got < want*0.999 || *got > want*1.001 {
			t.Errorf("q5 %s ratio = %v, want %v", name, got, want)
		}
	}
	if got := q5.KStreams.CPUSecondsPerMillion; got < 2173 || got > 2174 {
		t.Errorf("kstreams CPU-s/M = %v, want 2/920*1e6", got)
	}
	if q5.Same == nil || !*q5.Same || res.Rows[0].Same != nil {
		t.Errorf("q5 same = %v, q0 same = %v; want true and not compared", q5.Same, res.Rows[0].Same)
	}
	if res.Rows[0].Tarn != nil || res.Rows[0].Ratio != nil {
		t.Errorf("q0 has no tarn run, got %+v", res.Rows[0])
	}
	if !strings.Contains(table.String(), "2.00x") {
		t.Errorf("table lacks the q5 ratio:\n%s", table.String())
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != chartWidth || b.Dy() < 200 {
		t.Errorf("chart is %v", b)
	}
}

func TestRestoreBeforeRunIsAnError(t *testing.T) {
	_, err := build([]line{{Kind: "restore", System: "kstreams", Query: "q5", Data: []byte(`{}`)}})
	if err == nil {
		t.Error("build accepted a restore with no run")
	}
}
