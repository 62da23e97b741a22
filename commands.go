package tarn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tarnhq/tarn/migrations"
)

func runVersion(_ context.Context, _ Program, inv invocation) error {
	fmt.Fprintln(inv.stdout, version())
	return nil
}

// version reports the module version and VCS revision the binary was built from.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "tarn (unknown version)"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return fmt.Sprintf("tarn %s (%s)", v, info.GoVersion)
}

func runMigrate(ctx context.Context, _ Program, inv invocation) error {
	if inv.cfg.Postgres == "" {
		return errors.New("--postgres is required: the database to migrate")
	}
	db, err := migrations.Open(inv.cfg.Postgres)
	if err != nil {
		return err
	}
	defer db.Close()
	v, err := migrations.Up(ctx, db)
	if err != nil {
		return err
	}
	fmt.Fprintf(inv.stdout, "migrations applied; database at version %d\n", v)
	return nil
}

// runReset deletes the local stores. Nothing is lost: every store restores from its changelog
// on the next start. It asks for a literal "yes" argument, since the restore can take a while.
func runReset(_ context.Context, _ Program, inv invocation) error {
	if len(inv.args) != 1 || inv.args[0] != "yes" {
		return fmt.Errorf("this deletes %s; the stores restore from their changelogs on the next start. Run: tarn reset --data-dir %s yes",
			inv.cfg.DataDir, inv.cfg.DataDir)
	}
	if _, err := os.Stat(inv.cfg.DataDir); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(inv.stdout, "%s does not exist; nothing to reset\n", inv.cfg.DataDir)
		return nil
	}
	if err := os.RemoveAll(inv.cfg.DataDir); err != nil {
		return err
	}
	fmt.Fprintf(inv.stdout, "deleted %s\n", inv.cfg.DataDir)
	return nil
}

// viewStatus is the part of GET /v1/views that tarn status prints.
type viewStatus struct {
	Name       string          `json:"name"`
	Version    int             `json:"version"`
	State      string          `json:"state"`
	Windowed   bool            `json:"windowed"`
	Partitions int32           `json:"partitions"`
	Owned      []int32         `json:"owned"`
	Lag        int64           `json:"lag"`
	Position   json.RawMessage `json:"position"`
	Problem    string          `json:"problem"`
	Rebuild    *struct {
		Version      int                        `json:"version"`
		State        string                     `json:"state"`
		Reason       string                     `json:"reason"`
		Records      int64                      `json:"records"`
		Lag          int64                      `json:"lag"`
		Rate         float64                    `json:"rate"`
		ETASeconds   float64                    `json:"eta_seconds"`
		ShadowKeys   int                        `json:"shadow_keys"`
		ShadowDiffer int                        `json:"shadow_differ"`
		ShadowCut    map[string]map[int32]int64 `json:"shadow_cut"`
	} `json:"rebuild"`
}

func runStatus(ctx context.Context, _ Program, inv invocation) error {
	var body struct {
		Views []viewStatus `json:"views"`
	}
	if err := callAPI(ctx, inv.cfg, http.MethodGet, "/v1/views", &body); err != nil {
		return err
	}
	sort.Slice(body.Views, func(i, j int) bool { return body.Views[i].Name < body.Views[j].Name })
	tw := tabwriter.NewWriter(inv.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VIEW\tVERSION\tSTATE\tPARTITIONS HERE\tLAG\tPROGRESS")
	for _, v := range body.Views {
		fmt.Fprintf(tw, "%s\tv%d\t%s\t%s\t%d\t%s\n", v.Name, v.Version, v.State, partitionList(v.Owned, v.Partitions), v.Lag, progress(v))
	}
	return tw.Flush()
}

func partitionList(owned []int32, total int32) string {
	parts := make([]string, len(owned))
	for i, p := range owned {
		parts[i] = fmt.Sprint(p)
	}
	return fmt.Sprintf("%s of %d", strings.Join(parts, ","), total)
}

func progress(v viewStatus) string {
	switch r := v.Rebuild; {
	case v.Problem != "":
		return v.Problem
	case r != nil && r.State == "rebuilding":
		eta := "unknown"
		if r.ETASeconds >= 0 {
			eta = (time.Duration(r.ETASeconds) * time.Second).String()
		}
		return fmt.Sprintf("rebuilding v%d: %d records, %d to go, %.0f/s, %s left", r.Version, r.Records, r.Lag, r.Rate, eta)
	case r != nil:
		s := fmt.Sprintf("rebuild v%d %s", r.Version, r.State)
		if r.Reason != "" {
			s += ": " + r.Reason
		}
		if r.ShadowKeys > 0 {
			where := "where the versions stood"
			if r.ShadowCut != nil {
				where = "at one input position"
			}
			s += fmt.Sprintf(" (shadow check: %d of %d keys differ, compared %s)", r.ShadowDiffer, r.ShadowKeys, where)
		}
		return s
	case v.State == "restoring":
		return "restoring"
	}
	return "-"
}

func runRebuild(ctx context.Context, _ Program, inv invocation) error {
	if len(inv.args) != 1 {
		return errors.New("name the view to rebuild: tarn rebuild <view>")
	}
	var body map[string]any
	if err := callAPI(ctx, inv.cfg, http.MethodPost, "/v1/views/"+url.PathEscape(inv.args[0])+"/rebuild", &body); err != nil {
		return err
	}
	out, _ := json.MarshalIndent(body, "", "  ")
	fmt.Fprintf(inv.stdout, "%s\n", out)
	return nil
}

// callAPI sends one request to the instance at --http and decodes its JSON answer, turning a
// problem body into an error that says what the server said.
func callAPI(ctx context.Context, cfg Config, method, path string, into any) error {
	base := cfg.Advertise
	if base == "" {
		base = "http://" + cfg.HTTP
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return err
	}
	if cfg.TokenFile != "" {
		tok, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return fmt.Errorf("token-file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("no tarn instance answers at %s (set --http or --advertise): %w", base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var problem struct{ Title, Detail string }
		json.Unmarshal(raw, &problem)
		return fmt.Errorf("%s %s: %s: %s %s", method, path, resp.Status, problem.Title, problem.Detail)
	}
	return json.Unmarshal(raw, into)
}
