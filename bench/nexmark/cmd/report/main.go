// Command report turns the JSON lines that bench/run.sh collects (generator, ceiling, and one
// line per query run or restore of each system) into the results file, a table on stdout and a
// PNG chart. Example:
//
//	report -in runs.jsonl -json results.json -png results.png
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// line is one measurement as run.sh writes it: data is the program's own JSON line, and the
// CPU and RSS figures come from /usr/bin/time -v around it.
type line struct {
	Kind       string          `json:"kind"` // machine, generator, ceiling, run, restore, compare
	System     string          `json:"system"`
	Query      string          `json:"query"`
	Guarantee  string          `json:"guarantee"`
	Data       json.RawMessage `json:"data"`
	CPUSeconds float64         `json:"cpuSeconds"`
	PeakRSSKB  int64           `json:"peakRssKB"`
	Load       string          `json:"loadavg"`
}

// figures is what every run and restore line's data holds.
type figures struct {
	Records       int64   `json:"records"`
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"recordsPerSec"`
	Outputs       int64   `json:"outputs"`
}

// Measure is one system's figures for one query and guarantee.
type Measure struct {
	Records              int64   `json:"records"`
	Seconds              float64 `json:"seconds"`
	RecordsPerSec        float64 `json:"recordsPerSec"`
	CPUSecondsPerMillion float64 `json:"cpuSecondsPerMillion"`
	PeakRSSMB            float64 `json:"peakRssMB"`
	Outputs              int64   `json:"outputs"`
	LoadAvg              string  `json:"loadavg,omitempty"`
	RestoreRecords       int64   `json:"restoreRecords,omitempty"`
	RestoreSeconds       float64 `json:"restoreSeconds,omitempty"`
	RestoreRecordsPerSec float64 `json:"restoreRecordsPerSec,omitempty"`
	RestorePeakRSSMB     float64 `json:"restorePeakRssMB,omitempty"`
}

// Row compares the systems on one query and guarantee.
type Row struct {
	Query             string   `json:"query"`
	Guarantee         string   `json:"guarantee"`
	KStreams          *Measure `json:"kstreams"`
	Tarn              *Measure `json:"tarn"` // null until bench/tarnq implements the query
	Ratio             *float64 `json:"ratio"`
	RestoreRatio      *float64 `json:"restoreRatio"`
	RSSRatio          *float64 `json:"rssRatio"`
	TarnOfCeiling     *float64 `json:"tarnOfCeiling"`
	KStreamsOfCeiling float64  `json:"kstreamsOfCeiling"`
	// Same says whether tarn's output equalled Kafka Streams' (bench/outputs); null when they
	// were not compared. Verdict is the comparison's own line.
	Same    *bool           `json:"same"`
	Verdict json.RawMessage `json:"verdict,omitempty"`
}

// Results is the results file.
type Results struct {
	Machine   json.RawMessage `json:"machine"`
	Generator json.RawMessage `json:"generator"`
	Ceiling   *Measure        `json:"ceiling"`
	Rows      []*Row          `json:"rows"`
}

func main() {
	in := flag.String("in", "", "JSON lines written by bench/run.sh (required)")
	out := flag.String("json", "", "results file to write")
	png := flag.String("png", "", "chart to write")
	flag.Parse()
	if err := run(*in, *out, *png, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(in, out, png string, w io.Writer) error {
	lines, err := readLines(in)
	if err != nil {
		return err
	}
	res, err := build(lines)
	if err != nil {
		return err
	}
	printTable(w, res)
	if out != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if png != "" {
		return writeChart(png, res)
	}
	return nil
}

func readLines(path string) ([]line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		lines = append(lines, l)
	}
	return lines, sc.Err()
}

func build(lines []line) (*Results, error) {
	res := &Results{}
	rows := map[[2]string]*Row{}
	rowOf := func(l line) *Row {
		k := [2]string{l.Query, l.Guarantee}
		if rows[k] == nil {
			rows[k] = &Row{Query: l.Query, Guarantee: l.Guarantee}
			res.Rows = append(res.Rows, rows[k])
		}
		return rows[k]
	}
	for _, l := range lines {
		var f figures
		if l.Kind == "ceiling" || l.Kind == "run" || l.Kind == "restore" {
			if err := json.Unmarshal(l.Data, &f); err != nil {
				return nil, fmt.Errorf("%s %s %s: %w", l.Kind, l.System, l.Query, err)
			}
		}
		switch l.Kind {
		case "machine":
			res.Machine = l.Data
		case "generator":
			res.Generator = l.Data
		case "ceiling":
			res.Ceiling = measureOf(f, l)
		case "run":
			r := rowOf(l)
			*systemOf(r, l.System) = measureOf(f, l)
		case "restore":
			m := *systemOf(rowOf(l), l.System)
			if m == nil {
				return nil, fmt.Errorf("restore of %s %s %s before its run", l.System, l.Query, l.Guarantee)
			}
			m.RestoreRecords, m.RestoreSeconds, m.RestoreRecordsPerSec = f.Records, f.Seconds, f.RecordsPerSec
			m.RestorePeakRSSMB = float64(l.PeakRSSKB) / 1024
		case "compare":
			var v struct {
				Equal bool `json:"equal"`
			}
			if err := json.Unmarshal(l.Data, &v); err != nil {
				return nil, fmt.Errorf("compare %s %s: %w", l.Query, l.Guarantee, err)
			}
			r := rowOf(l)
			r.Same, r.Verdict = &v.Equal, l.Data
		}
	}
	for _, r := range res.Rows {
		compare(r, res.Ceiling)
	}
	slices.SortStableFunc(res.Rows, func(a, b *Row) int { return queryOrder(a.Query) - queryOrder(b.Query) })
	return res, nil
}

func systemOf(r *Row, system string) **Measure {
	if system == "tarn" {
		return &r.Tarn
	}
	return &r.KStreams
}

func measureOf(f figures, l line) *Measure {
	m := &Measure{Records: f.Records, Seconds: f.Seconds, RecordsPerSec: f.RecordsPerSec, Outputs: f.Outputs,
		PeakRSSMB: float64(l.PeakRSSKB) / 1024, LoadAvg: l.Load}
	if f.Records > 0 {
		m.CPUSecondsPerMillion = l.CPUSeconds / float64(f.Records) * 1e6
	}
	return m
}

func compare(r *Row, ceiling *Measure) {
	ratio := func(a, b float64) *float64 {
		if b == 0 {
			return nil
		}
		x := a / b
		return &x
	}
	if ceiling != nil && r.KStreams != nil && ceiling.RecordsPerSec > 0 {
		r.KStreamsOfCeiling = r.KStreams.RecordsPerSec / ceiling.RecordsPerSec
	}
	if r.Tarn == nil || r.KStreams == nil {
		return
	}
	r.Ratio = ratio(r.Tarn.RecordsPerSec, r.KStreams.RecordsPerSec)
	r.RestoreRatio = ratio(r.Tarn.RestoreRecordsPerSec, r.KStreams.RestoreRecordsPerSec)
	r.RSSRatio = ratio(r.Tarn.PeakRSSMB, r.KStreams.PeakRSSMB)
	if ceiling != nil {
		r.TarnOfCeiling = ratio(r.Tarn.RecordsPerSec, ceiling.RecordsPerSec)
	}
}

var queries = []string{"q0", "q1", "q2", "q3", "q5", "q7", "q8", "q17", "q18", "q20"}

func queryOrder(q string) int {
	if i := slices.Index(queries, q); i >= 0 {
		return i
	}
	return len(queries)
}

func shortGuarantee(g string) string {
	switch g {
	case "at_least_once":
		return "ALO"
	case "exactly_once_v2":
		return "EOS"
	}
	return g
}

func printTable(w io.Writer, res *Results) {
	if res.Ceiling != nil {
		fmt.Fprintf(w, "ceiling (raw franz-go consume of all input): %s records/s, %.2f CPU-s/M, %.0f MB RSS\n\n",
			human(res.Ceiling.RecordsPerSec), res.Ceiling.CPUSecondsPerMillion, res.Ceiling.PeakRSSMB)
	}
	fmt.Fprintf(w, "%-5s %-4s %9s | %9s %9s %6s | %7s %7s | %7s %7s | %9s %9s | %6s %6s | %4s\n",
		"query", "mode", "records", "tarn/s", "kstr/s", "ratio", "tCPU/M", "kCPU/M", "tRSS", "kRSS",
		"tRestore", "kRestore", "t%ceil", "k%ceil", "same")
	for _, r := range res.Rows {
		t, k := orEmpty(r.Tarn), orEmpty(r.KStreams)
		fmt.Fprintf(w, "%-5s %-4s %9d | %9s %9s %6s | %7s %7s | %7s %7s | %9s %9s | %6s %6s | %4s\n",
			r.Query, shortGuarantee(r.Guarantee), k.Records,
			maybe(r.Tarn, human(t.RecordsPerSec)), human(k.RecordsPerSec), ratioText(r.Ratio),
			maybe(r.Tarn, fmt.Sprintf("%.2f", t.CPUSecondsPerMillion)), fmt.Sprintf("%.2f", k.CPUSecondsPerMillion),
			maybe(r.Tarn, fmt.Sprintf("%.0fM", t.PeakRSSMB)), fmt.Sprintf("%.0fM", k.PeakRSSMB),
			maybe(r.Tarn, restoreText(t)), restoreText(k),
			pct(r.TarnOfCeiling), fmt.Sprintf("%.0f%%", 100*r.KStreamsOfCeiling), sameText(r.Same))
	}
}

// sameText is "yes" or "NO" for a compared row, "-" otherwise.
func sameText(same *bool) string {
	switch {
	case same == nil:
		return "-"
	case *same:
		return "yes"
	}
	return "NO"
}

func orEmpty(m *Measure) Measure {
	if m == nil {
		return Measure{}
	}
	return *m
}

func maybe[T any](p *T, s string) string {
	if p == nil {
		return "-"
	}
	return s
}

func ratioText(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *r)
}

func pct(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100**r)
}

func restoreText(m Measure) string {
	if m.RestoreRecords == 0 {
		return "-"
	}
	return human(m.RestoreRecordsPerSec)
}

// human writes a rate with a k or M suffix.
func human(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}
