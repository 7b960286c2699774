package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/environments"
)

// envOutputs are the forms of environments' output.
var envOutputs = []string{"table", "wide", "json"}

// termWidth is the width the table form fits: $COLUMNS when the shell
// exports it, else 80.
func termWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 40 && n <= 1000 {
		return n
	}
	return 80
}

// shortIDs gives each 64-hex build id the shortest prefix of at least 12
// digits that no other listed build shares, as git abbreviates: a prefix
// every command taking a build id resolves (environments rm, export,
// --environment). Any other id (an E2B template's) stays whole.
func shortIDs(ids []string) map[string]string {
	out := map[string]string{}
	for _, id := range ids {
		if len(id) != 64 {
			out[id] = id
			continue
		}
		n := 12
		for ; n < 64; n++ {
			unique := true
			for _, o := range ids {
				if o != id && strings.HasPrefix(o, id[:n]) {
					unique = false
					break
				}
			}
			if unique {
				break
			}
		}
		out[id] = id[:n]
	}
	return out
}

// writeTable prints rows under header in columns two spaces apart. In the
// table form (fit) the last column, free text, is shortened with "…" so
// that a line fits width; the other columns (names, ids) are never cut.
func writeTable(w io.Writer, width int, fit bool, header []string, rows [][]string) {
	all := append([][]string{header}, rows...)
	widths := make([]int, len(header))
	for _, r := range all {
		for i, c := range r[:len(r)-1] {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	lead := 0
	for _, wd := range widths[:len(widths)-1] {
		lead += wd + 2
	}
	room := width - lead
	if fit && room < 10 {
		// Too narrow for any of the free text: left out (-o wide has it).
		for i, r := range all {
			all[i] = append(r[:len(r)-1:len(r)-1], "")
		}
	}
	for _, r := range all {
		var b strings.Builder
		for i, c := range r[:len(r)-1] {
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
		}
		last := r[len(r)-1]
		if fit && room >= 10 && utf8.RuneCountInString(last) > room {
			last = string([]rune(last)[:room-1]) + "…"
		}
		b.WriteString(last)
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

type envBuildJSON struct {
	*environments.Build
	Names []string `json:"names"`
}

type envSkippedJSON struct {
	Variant string `json:"variant"`
	Error   string `json:"error"`
}

type envListJSON struct {
	Builds       []envBuildJSON          `json:"builds"`
	Environments []sandboxes.Environment `json:"environments"`
	Skipped      []envSkippedJSON        `json:"skipped"`
}

// printEnvironments is environments' listing: the builds in the store,
// then each variant's environments.
func printEnvironments(cmd *cobra.Command, variant, dir, output string) error {
	switch output {
	case "table", "wide", "json":
	default:
		return fmt.Errorf("-o %q: use one of %s", output, strings.Join(envOutputs, ", "))
	}
	out := cmd.OutOrStdout()
	builds, names, err := environments.List(dir)
	if err != nil {
		return err
	}
	namesOf := map[string][]string{}
	for n, id := range names {
		namesOf[id] = append(namesOf[id], n)
	}
	variants := sandboxes.Variants()
	if variant != "" {
		variants = []string{variant}
	}
	res := envListJSON{Builds: []envBuildJSON{}, Environments: []sandboxes.Environment{}, Skipped: []envSkippedJSON{}}
	for _, b := range builds {
		ns := namesOf[b.ID]
		sort.Strings(ns)
		if ns == nil {
			ns = []string{}
		}
		res.Builds = append(res.Builds, envBuildJSON{b, ns})
	}
	for _, v := range variants {
		envs, err := sandboxes.ListEnvironments(cmd.Context(), sandboxes.Config{Variant: v, EnvironmentDir: dir})
		if err != nil {
			res.Skipped = append(res.Skipped, envSkippedJSON{v, err.Error()})
			continue
		}
		res.Environments = append(res.Environments, envs...)
	}
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}

	var ids []string
	for _, b := range builds {
		ids = append(ids, b.ID)
	}
	for _, e := range res.Environments {
		if e.BuildID != "" {
			ids = append(ids, e.BuildID)
		}
	}
	short := shortIDs(ids)
	if output == "wide" {
		short = map[string]string{}
		for _, id := range ids {
			short[id] = id
		}
	}
	width, fit := termWidth(), output == "table"
	var rows [][]string
	for _, b := range res.Builds {
		label := strings.Join(b.Names, ",")
		if label == "" {
			label = "-"
		}
		rows = append(rows, []string{label, short[b.ID], fmt.Sprintf("%d MiB", b.SizeBytes>>20), b.CreatedAt.Local().Format("2006-01-02 15:04"), b.Base})
	}
	if len(rows) == 0 {
		fmt.Fprintln(out, "No environment built yet: `code-sandboxes environments build -f spec.yaml`;\n\"python\" builds on first use.")
	} else {
		writeTable(out, width, fit, []string{"BUILT", "BUILD ID", "SIZE", "CREATED", "BASE"}, rows)
	}
	fmt.Fprintln(out)
	rows = nil
	for _, e := range res.Environments {
		id := short[e.BuildID]
		if id == "" {
			id = "-"
		}
		rows = append(rows, []string{e.Variant, e.Name, id, e.Description})
	}
	for _, s := range res.Skipped {
		rows = append(rows, []string{s.Variant, "-", "-", "(skipped: " + s.Error + ")"})
	}
	writeTable(out, width, fit, []string{"VARIANT", "NAME", "BUILD ID", "DESCRIPTION"}, rows)
	if fit {
		fmt.Fprintln(out, "\nBuild ids: the shortest unique prefix (any command takes it); -o wide: whole.")
	}
	return nil
}
