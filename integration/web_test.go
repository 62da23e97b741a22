package integration

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkWebPage loads the web page in headless Chromium (Debian's chromium package, which
// scripts/deps.sh installs), checks that the views table filled with data from the API, and
// that a screenshot of it is not blank.
func checkWebPage(t *testing.T, base string) {
	browser := findChromium()
	if browser == "" {
		t.Fatal("no chromium to test the web page with; run scripts/deps.sh (apt-get install chromium)")
	}
	dir := t.TempDir()
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(dir, "profile"), "--virtual-time-budget=5000"}

	dom := chromium(t, browser, append(flags, "--dump-dom", base+"/")...)
	for _, want := range []string{"<td>price-range</td>", "<td>top-trades</td>", "state-running"} {
		if !strings.Contains(dom, want) {
			t.Fatalf("the page's views table lacks %q; DOM:\n%s", want, dom[:min(len(dom), 3000)])
		}
	}

	shot := filepath.Join(dir, "page.png")
	chromium(t, browser, append(flags, "--window-size=1000,700", "--screenshot="+shot, base+"/")...)
	raw, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if n := inkPixels(img); n < 2000 {
		t.Fatalf("screenshot looks blank: %d non-white pixels", n)
	}
}

func chromium(t *testing.T, browser string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, browser, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// inkPixels counts pixels that are clearly not white: text, table rules, coloured states.
func inkPixels(img image.Image) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xc000 || g < 0xc000 || bl < 0xc000 {
				n++
			}
		}
	}
	return n
}
