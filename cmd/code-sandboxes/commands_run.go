// Running code from the command line: exec and the REPL, and printing
// their results.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

func execCmd() *cobra.Command {
	var c common
	var file, figures string
	var quiet, jsonOut bool
	cmd := &cobra.Command{
		Use:   "exec [CODE]",
		Short: "Run code in a new sandbox and print its output (exit status 0 on success, 1 otherwise)",
		Example: `  code-sandboxes exec 'import sys; print(sys.version)'
  code-sandboxes exec -f script.py
  echo '1 + 1' | code-sandboxes exec
  code-sandboxes exec --language javascript 'console.log(6 * 7)'
  code-sandboxes exec --network all --package requests 'import requests'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := readCode(cmd, args, file)
			if err != nil {
				return err
			}
			lang, err := checkLanguage(c.language)
			if err != nil {
				return err
			}
			sb, done, err := c.open(cmd, time.Hour, 0)
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			var opts []sandboxes.RunOption
			if lang != "" {
				opts = append(opts, sandboxes.WithLanguage(lang))
			}
			if !jsonOut {
				// With --json stdout carries the JSON document alone; the
				// output is in it.
				opts = append(opts,
					sandboxes.OnStdout(func(m sandboxes.OutputMessage) { fmt.Fprint(out, m.Line) }),
					sandboxes.OnStderr(func(m sandboxes.OutputMessage) { fmt.Fprint(cmd.ErrOrStderr(), m.Line) }))
			}
			ex, err := sb.RunCode(ctx, code, opts...)
			if err != nil {
				return err
			}
			if jsonOut {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				_ = enc.Encode(ex)
			} else {
				printResults(cmd, ex, figures, quiet)
			}
			if !ex.Success() {
				return exitError{1}
			}
			return nil
		},
	}
	c.flags(cmd, true)
	c.existingFlag(cmd)
	c.languageFlag(cmd)
	cmd.Flags().Lookup("lifetime").Usage = "sandbox lifetime, e.g. 10m (default 1h; the sandbox ends when exec finishes)"
	cmd.Flags().StringVarP(&file, "file", "f", "", "read the code from a file ('-' = stdin)")
	cmd.Flags().StringVar(&figures, "figures-dir", ".", "where to save figures (PNG, JPEG, SVG) the code produces")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the code's own output")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the whole execution as JSON")
	return cmd
}

func readCode(cmd *cobra.Command, args []string, file string) (string, error) {
	switch {
	case len(args) == 1 && file != "":
		return "", fmt.Errorf("give the code as an argument or with -f, not both")
	case len(args) == 1:
		return args[0], nil
	case file != "" && file != "-":
		b, err := os.ReadFile(file)
		return string(b), err
	}
	if f, ok := cmd.InOrStdin().(*os.File); ok && file == "" {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return "", fmt.Errorf("no code given: pass it as an argument, with -f FILE, or on stdin")
		}
	}
	b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 16<<20))
	return string(b), err
}

var figureExt = map[string]string{sandboxes.MIMEPNG: "png", sandboxes.MIMEJPEG: "jpg", sandboxes.MIMESVG: "svg"}

func printResults(cmd *cobra.Command, ex *sandboxes.Execution, figures string, quiet bool) {
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	n := 0
	for _, r := range ex.Results {
		saved := false
		for mime, ext := range figureExt {
			if _, ok := r.Data[mime]; !ok {
				continue
			}
			var data []byte
			if mime == sandboxes.MIMESVG {
				s, _ := r.Data[mime].(string)
				data = []byte(s)
			} else if mime == sandboxes.MIMEPNG {
				data = r.PNG()
			} else {
				data = r.JPEG()
			}
			if len(data) == 0 {
				continue
			}
			n++
			p := filepath.Join(figures, fmt.Sprintf("figure-%d-%d.%s", ex.ExecutionCount, n, ext))
			if err := os.WriteFile(p, data, 0o644); err != nil {
				fmt.Fprintln(errw, "could not save figure:", err)
				continue
			}
			fmt.Fprintln(out, "figure saved:", p)
			saved = true
			break
		}
		if !saved && !quiet && r.Text() != "" {
			fmt.Fprintln(out, r.Text())
		}
	}
	if ex.Error != nil {
		if ex.Error.Traceback != "" {
			fmt.Fprintln(errw, ex.Error.Traceback)
		} else {
			fmt.Fprintf(errw, "%s: %s\n", ex.Error.Name, ex.Error.Value)
		}
	}
	if ex.Truncated {
		fmt.Fprintln(errw, "(output truncated)")
	}
}

func replCmd() *cobra.Command {
	var c common
	var figures string
	cmd := &cobra.Command{
		Use:   "repl",
		Short: "An interactive session in one sandbox (:exit to leave; the sandbox ends with the session unless --sandbox named it)",
		RunE: func(cmd *cobra.Command, args []string) error {
			lang, err := checkLanguage(c.language)
			if err != nil {
				return err
			}
			sb, done, err := c.open(cmd, 24*time.Hour, sandboxes.NoIdleTimeout)
			if err != nil {
				return err
			}
			defer done()
			return runREPL(cmd, sb, lang, figures)
		},
	}
	c.flags(cmd, true)
	c.existingFlag(cmd)
	c.languageFlag(cmd)
	cmd.Flags().Lookup("lifetime").Usage = "sandbox lifetime, e.g. 10m (default 24h; the sandbox ends with the session)"
	cmd.Flags().StringVar(&figures, "figures-dir", ".", "where to save figures")
	return cmd
}

// runREPL reads cells from stdin and runs them. Ctrl-C interrupts the
// running cell (KeyboardInterrupt) or, at the prompt, drops the block being
// typed; the session goes on. EOF, :exit, SIGTERM or SIGHUP end it.
func runREPL(cmd *cobra.Command, sb *sandboxes.Sandbox, lang, figures string) error {
	var langOpt []sandboxes.RunOption
	shown := "Python"
	if lang != "" {
		langOpt = append(langOpt, sandboxes.WithLanguage(lang))
		shown = lang
	}
	// main's context is cancelled by SIGINT; here Ctrl-C is for the cell,
	// so the session runs on a context of its own that SIGTERM ends.
	ctx, cancel := context.WithCancel(context.WithoutCancel(cmd.Context()))
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var busy atomic.Bool
	atPrompt := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-sigs:
				switch {
				case sig == syscall.SIGTERM || sig == syscall.SIGHUP:
					// Ended, or its terminal closed: end the session (and
					// the sandbox) rather than die and leave it running.
					cancel()
					return
				case busy.Load():
					ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
					_, _ = sb.Interrupt(ictx)
					icancel()
				default:
					select {
					case atPrompt <- struct{}{}:
					default:
					}
				}
			}
		}
	}()

	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		in := bufio.NewScanner(cmd.InOrStdin())
		in.Buffer(make([]byte, 64<<10), 16<<20)
		for in.Scan() {
			select {
			case lines <- in.Text():
			case <-ctx.Done():
				return
			}
		}
		readErr <- in.Err()
	}()

	out := cmd.OutOrStdout()
	prompt := fmt.Sprintf("sandbox(%s:%s)>>> ", sb.Variant(), sb.Name())
	if lang != "" && lang != "python" {
		prompt = fmt.Sprintf("sandbox(%s:%s %s)>>> ", sb.Variant(), sb.Name(), lang)
	}
	fmt.Fprintln(out, "Type code; end a block with an empty line. :exit leaves, :help helps, Ctrl-C interrupts.")
	var block []string
	fmt.Fprint(out, prompt)
	for {
		var line string
		select {
		case <-ctx.Done():
			fmt.Fprintln(out)
			return nil
		case err := <-readErr:
			fmt.Fprintln(out)
			return err
		case <-atPrompt:
			// The terminal dropped the line being typed; drop the block too.
			block = nil
			fmt.Fprint(out, "\nKeyboardInterrupt\n"+prompt)
			continue
		case line = <-lines:
		}
		if len(block) == 0 {
			switch strings.TrimSpace(line) {
			case ":exit", ":quit", "exit", "quit":
				return nil
			case ":help":
				fmt.Fprintf(out, "Enter %s code. A line ending in ':', '{', '(', '[' or '\\' starts a block that ends with an empty line. Ctrl-C interrupts the running code. :exit leaves.\n", shown)
				fmt.Fprint(out, prompt)
				continue
			case "":
				fmt.Fprint(out, prompt)
				continue
			}
		}
		block = append(block, line)
		trimmed := strings.TrimRight(line, " \t")
		// A block opens on a line that can't end a statement: Python's
		// ':' and a continuation; brackets for the languages with braces.
		open := strings.HasSuffix(trimmed, ":") || strings.HasSuffix(trimmed, "\\") || strings.HasSuffix(trimmed, "{") ||
			strings.HasSuffix(trimmed, "(") || strings.HasSuffix(trimmed, "[") || len(block) > 1
		if open && !(len(block) > 1 && strings.TrimSpace(line) == "") {
			fmt.Fprint(out, "... ")
			continue
		}
		code := strings.Join(block, "\n")
		block = nil
		busy.Store(true)
		ex, err := sb.RunCode(ctx, code, append(langOpt,
			sandboxes.OnStdout(func(m sandboxes.OutputMessage) { fmt.Fprint(out, m.Line) }),
			sandboxes.OnStderr(func(m sandboxes.OutputMessage) { fmt.Fprint(cmd.ErrOrStderr(), m.Line) }))...)
		busy.Store(false)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		printResults(cmd, ex, figures, false)
		if ex.Interrupted && ex.Error == nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "KeyboardInterrupt")
		}
		if ex.ExitCode != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "(exit code %d)\n", *ex.ExitCode)
		}
		fmt.Fprint(out, prompt)
	}
}
