//go:build !localonly

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/interpreter"
	"github.com/code-sandboxes/code-sandboxes/interpreter/lm"
	"github.com/spf13/cobra"
)

type lmFlags struct {
	provider, model, baseURL, apiKey string
	noImages                         bool
	maxTokens                        int
}

func (l *lmFlags) client() (lm.Client, error) {
	p := strings.ToLower(l.provider)
	if p == "" {
		p = "openai"
		if os.Getenv("OPENAI_API_KEY") == "" && os.Getenv("OPENAI_BASE_URL") == "" && os.Getenv("ANTHROPIC_API_KEY") != "" {
			p = "anthropic"
		}
	}
	switch p {
	case "openai":
		m := l.model
		if m == "" {
			m = "gpt-4o"
		}
		return lm.NewOpenAI(lm.OpenAIConfig{APIKey: l.apiKey, BaseURL: l.baseURL, Model: m, NoImages: l.noImages, MaxTokens: l.maxTokens})
	case "anthropic":
		return lm.NewAnthropic(lm.AnthropicConfig{APIKey: l.apiKey, BaseURL: l.baseURL, Model: l.model, NoImages: l.noImages, MaxTokens: l.maxTokens})
	}
	return nil, fmt.Errorf("unknown --provider %q: use openai (also vLLM, Ollama, llama.cpp servers) or anthropic", l.provider)
}

// saveAttachment writes a into dir without overwriting: name, name-1, …
func saveAttachment(dir string, a interpreter.Attachment) (string, error) {
	name := filepath.Base(a.Name)
	if name == "." || name == "/" || name == "" {
		name = "attachment"
	}
	ext := filepath.Ext(name)
	stem := strings.TrimSuffix(name, ext)
	for i := 0; i < 1000; i++ {
		p := filepath.Join(dir, name)
		if i > 0 {
			p = filepath.Join(dir, fmt.Sprintf("%s-%d%s", stem, i, ext))
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("saving %s: %w", name, err)
		}
		if _, err := f.Write(a.Data); err != nil {
			f.Close()
			return "", fmt.Errorf("saving %s: %w", p, err)
		}
		return p, f.Close()
	}
	return "", fmt.Errorf("saving %s: too many files of that name in %s", name, dir)
}

func interpretCmd() *cobra.Command {
	var c common
	var l lmFlags
	var files []string
	var outDir string
	var maxSteps int
	var verbose, jsonOut bool
	cmd := &cobra.Command{
		Use:   "interpret [MESSAGE]",
		Short: "Answer a request with an LLM that writes and runs code in a sandbox; files the answer links are saved",
		Long: `interpret gives the request to a model with one tool, execute_code, runs the code
it writes in a new sandbox, feeds back stdout, stderr, errors and figures, and
prints the model's final answer. Files the answer links as sandbox:/… are
downloaded into --out.

Models: --provider openai (the chat-completions API of OpenAI, or of vLLM,
Ollama, llama.cpp servers via --base-url / OPENAI_BASE_URL; key OPENAI_API_KEY)
or --provider anthropic (key ANTHROPIC_API_KEY). Without --provider, anthropic
is used when only ANTHROPIC_API_KEY is set.`,
		Example: `  code-sandboxes interpret "Plot a histogram of 1000 normal samples"
  code-sandboxes interpret -a sales.csv "Which month sold most? Chart it."
  OPENAI_BASE_URL=http://127.0.0.1:11434/v1 code-sandboxes interpret --model qwen2.5-coder "…"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			msg := ""
			if len(args) == 1 && args[0] != "-" {
				msg = args[0]
			} else {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
				if err != nil {
					return fmt.Errorf("reading the request from stdin: %w", err)
				}
				msg = string(b)
			}
			if strings.TrimSpace(msg) == "" {
				return errors.New("give a request as the argument or on stdin")
			}
			model, err := l.client()
			if err != nil {
				return err
			}
			var atts []interpreter.Attachment
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return fmt.Errorf("attachment: %w", err)
				}
				atts = append(atts, interpreter.Attachment{Name: filepath.Base(f), Data: b})
			}
			cfg, err := c.config()
			if err != nil {
				return err
			}
			if cfg.MaxLifetime == 0 && ownsLifetimes(cfg.Variant) {
				cfg.MaxLifetime = time.Hour
			}
			ctx := cmd.Context()
			sb, err := interpreter.Create(ctx, cfg)
			if err != nil {
				return err
			}
			defer sb.Terminate()
			it := interpreter.New(sb, model)
			it.MaxSteps = maxSteps
			it.Timeout = c.timeout
			errw := cmd.ErrOrStderr()
			if verbose {
				it.OnExecution = func(r interpreter.CodeExecResult) {
					fmt.Fprintf(errw, "── code (%s) ──\n%s\n── output ──\n%s\n", r.ID, r.Code, r.Output)
				}
			}
			out, err := it.Execute(ctx, msg, atts)
			if err != nil {
				return err
			}
			var saved []string
			for _, a := range out.Attachments {
				p, err := saveAttachment(outDir, a)
				if err != nil {
					return err
				}
				saved = append(saved, p)
			}
			if jsonOut {
				if out.Executions == nil {
					out.Executions = []interpreter.CodeExecResult{} // [], never null
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					*interpreter.Output
					Saved []string `json:"saved,omitempty"`
				}{out, saved})
			}
			fmt.Fprintln(cmd.OutOrStdout(), out.Text)
			for _, p := range saved {
				fmt.Fprintf(errw, "attachment saved: %s\n", p)
			}
			for _, m := range out.MissingAttachments {
				fmt.Fprintf(errw, "attachment not downloaded: %s\n", m)
			}
			return nil
		},
	}
	c.flags(cmd, true)
	f := cmd.Flags()
	f.StringVar(&l.provider, "provider", "", "model API: openai or anthropic (default: from the keys in the environment)")
	f.StringVar(&l.model, "model", "", "model name (default gpt-4o, or "+lm.DefaultAnthropicModel+")")
	f.StringVar(&l.baseURL, "base-url", "", "API base URL (default $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL, then the provider's)")
	f.StringVar(&l.apiKey, "api-key", "", "API key (default $OPENAI_API_KEY / $ANTHROPIC_API_KEY)")
	f.BoolVar(&l.noImages, "no-images", false, "the model can't see images: describe figures in text")
	f.IntVar(&l.maxTokens, "max-tokens", 0, "bound on each model answer's tokens")
	f.StringArrayVarP(&files, "attach", "a", nil, "upload a file to /files/<name> (repeatable)")
	f.StringVarP(&outDir, "out", "o", ".", "directory for the attachments of the answer")
	f.IntVar(&maxSteps, "max-steps", interpreter.DefaultMaxSteps, "bound on model calls")
	f.BoolVarP(&verbose, "verbose", "V", false, "print each execution's code and output to stderr")
	f.BoolVar(&jsonOut, "json", false, "print the answer, executions and saved files as JSON")
	return cmd
}
