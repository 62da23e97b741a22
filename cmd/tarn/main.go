// Command tarn runs tarn's materialized views: it wires Postgres CDC, the views runtime, the
// local stores and the HTTP query API together.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "tarn:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("missing command; try: tarn version")
	}
	switch args[0] {
	case "version":
		fmt.Println(version())
		return nil
	default:
		return fmt.Errorf("unknown command %q; try: tarn version", args[0])
	}
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
