package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
)

var (
	white   = color.RGBA{255, 255, 255, 255}
	black   = color.RGBA{20, 20, 20, 255}
	grey    = color.RGBA{150, 150, 150, 255}
	tarnCol = color.RGBA{31, 119, 180, 255}
	kstrCol = color.RGBA{255, 127, 14, 255}
	ceilCol = color.RGBA{200, 30, 30, 255}
)

// bar is one bar of a chart: a label on its left, a length, and a text after it.
type bar struct {
	label string
	value float64
	color color.RGBA
}

// section is one chart: a title, groups of bars, and an optional reference line.
type section struct {
	title    string
	groups   [][]bar
	ref      float64
	refLabel string
}

const (
	fontScale  = 2
	chartWidth = 1200
	labelWidth = 170
	valueWidth = 110
	barHeight  = 18
	groupGap   = 8
	titleSpace = 40
)

func writeChart(path string, res *Results) error {
	rate := section{title: "records/s: tarn (blue) and Kafka Streams (orange), red line: raw consume ceiling"}
	restore := section{title: "restore from changelogs after the state dir is wiped, records/s"}
	if res.Ceiling != nil {
		rate.ref, rate.refLabel = res.Ceiling.RecordsPerSec, "ceiling "+human(res.Ceiling.RecordsPerSec)
	}
	for _, r := range res.Rows {
		name := r.Query + " " + shortGuarantee(r.Guarantee)
		var g, gr []bar
		if r.Tarn != nil {
			g = append(g, bar{name + " tarn", r.Tarn.RecordsPerSec, tarnCol})
			if r.Tarn.RestoreRecords > 0 {
				gr = append(gr, bar{name + " tarn", r.Tarn.RestoreRecordsPerSec, tarnCol})
			}
		}
		if r.KStreams != nil {
			g = append(g, bar{name + " kstr", r.KStreams.RecordsPerSec, kstrCol})
			if r.KStreams.RestoreRecords > 0 {
				gr = append(gr, bar{name + " kstr", r.KStreams.RestoreRecordsPerSec, kstrCol})
			}
		}
		rate.groups = append(rate.groups, g)
		if len(gr) > 0 {
			restore.groups = append(restore.groups, gr)
		}
	}
	sections := []section{rate}
	if len(restore.groups) > 0 {
		sections = append(sections, restore)
	}
	height := 0
	for _, s := range sections {
		height += s.height()
	}
	img := image.NewRGBA(image.Rect(0, 0, chartWidth, height))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	y := 0
	for _, s := range sections {
		s.draw(img, y)
		y += s.height()
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	return f.Close()
}

func (s section) height() int {
	h := titleSpace + 30
	for _, g := range s.groups {
		h += len(g)*(barHeight+2) + groupGap
	}
	return h
}

func (s section) draw(img *image.RGBA, top int) {
	drawText(img, 10, top+10, fontScale, s.title, black)
	maxV := s.ref
	for _, g := range s.groups {
		for _, b := range g {
			maxV = max(maxV, b.value)
		}
	}
	if maxV <= 0 {
		maxV = 1
	}
	span := chartWidth - labelWidth - valueWidth - 10
	scale := float64(span) / maxV
	y := top + titleSpace
	for _, g := range s.groups {
		for _, b := range g {
			drawText(img, 10, y+2, fontScale, b.label, black)
			w := int(b.value * scale)
			fill(img, labelWidth, y, max(w, 1), barHeight, b.color)
			drawText(img, labelWidth+w+6, y+2, fontScale, human(b.value), black)
			y += barHeight + 2
		}
		y += groupGap
	}
	fill(img, labelWidth, top+titleSpace-4, 1, y-top-titleSpace, grey)
	if s.ref > 0 {
		x := labelWidth + int(s.ref*scale)
		for yy := top + titleSpace - 4; yy < y; yy += 6 {
			fill(img, x, yy, 2, 3, ceilCol)
		}
		drawText(img, max(x-len(s.refLabel)*glyphWidth*fontScale, labelWidth), y+4, fontScale, s.refLabel, ceilCol)
	}
}
