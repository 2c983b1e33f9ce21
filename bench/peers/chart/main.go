// Command chart turns the raw runs of bench/peers/run.sh into the peer
// comparison's outputs: a JSON summary, a markdown table and a PNG chart.
//
// Usage: chart -raw DIR -md FILE -png FILE -json FILE
//
//	chart -tls -raw DIR -md FILE -json FILE
//
// With -tls, DIR holds the runs of run.sh --tls instead: per run,
// PROXY.SCENARIO.ROUND.out (wrk's, h2load's or bench/peers/tlsconns's
// output) beside PROXY.SCENARIO.ROUND.meta.json, and meta.json; no chart
// is drawn.
//
// DIR holds, per run, PROXY.SCENARIO.ROUND.json (a `portcullis siege -json`
// report) beside PROXY.SCENARIO.ROUND.meta.json (the proxy's CPU ticks and
// the wall time around the run, written by run.sh), and one meta.json with
// the versions and the command. Figures are medians over rounds; ratios are
// taken within a round first (attacked against that round's no-attack run,
// proxy against that round's direct-to-backend run), then their median.
//
// Exit status: 0 on success, 1 when the runs cannot be read or the outputs
// cannot be written, 2 for bad flags.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	raw := fs.String("raw", "", "directory of raw runs (required)")
	md := fs.String("md", "results.md", "markdown table to write")
	png := fs.String("png", "peers.png", "PNG chart to write")
	js := fs.String("json", "results.json", "JSON summary to write")
	tls := fs.Bool("tls", false, "DIR holds the runs of run.sh --tls")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *raw == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: chart [-tls] -raw DIR [-md FILE] [-png FILE] [-json FILE]")
		return 2
	}
	if *tls {
		if err := buildTLS(*raw, *md, *js); err != nil {
			fmt.Fprintln(os.Stderr, "chart:", err)
			return 1
		}
		return 0
	}
	if err := build(*raw, *md, *png, *js); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		return 1
	}
	return 0
}

func build(rawDir, mdPath, pngPath, jsonPath string) error {
	meta, runs, err := loadRuns(rawDir)
	if err != nil {
		return err
	}
	sum := summarize(meta, runs)
	if err := writeJSON(jsonPath, sum); err != nil {
		return err
	}
	if err := writeMarkdown(mdPath, sum); err != nil {
		return err
	}
	return writeChart(pngPath, sum)
}
