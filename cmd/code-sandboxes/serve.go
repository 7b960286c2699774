package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/spf13/cobra"
)

// serveCmd is `code-sandboxes serve`: a self-hosted E2B on one listener.
func serveCmd() *cobra.Command {
	var (
		listen, apiKey, keyFile, runtimeDir, network, memory string
		cpu                                                  float64
		maxTimeout                                           time.Duration
		keep, verbose                                        bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the E2B API (control and data plane) so that E2B's official SDKs run on local sandboxes",
		Long: `Serve the E2B API on one listener: the control plane (create, list, get,
kill, timeout, connect) and the data plane (envd and the code interpreter,
proxied to each sandbox's agent). Point the official SDKs at it with

  E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:3000 E2B_API_KEY=e2b_…

The API keys are --api-key and those in --api-key-file, else $E2B_API_KEY,
else one is generated and printed.
When allowInternetAccess is not given at create (the JS SDK's default), the
sandbox gets --default-network: none unless you choose all (E2B's default).
On SIGINT or SIGTERM the sandboxes this server created are killed, unless
--keep-sandboxes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			generated := false
			var keys []string
			if apiKey != "" {
				keys = append(keys, apiKey)
			}
			if keyFile != "" {
				fileKeys, err := readKeyFile(keyFile)
				if err != nil {
					return err
				}
				keys = append(keys, fileKeys...)
			}
			if len(keys) == 0 && os.Getenv("E2B_API_KEY") != "" {
				keys = append(keys, os.Getenv("E2B_API_KEY"))
			}
			if len(keys) == 0 {
				var b [20]byte
				_, _ = rand.Read(b[:])
				apiKey, generated = "e2b_"+hex.EncodeToString(b[:]), true
				keys = append(keys, apiKey)
			}
			mem, err := parseSize(memory)
			if err != nil {
				return err
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			srv, err := e2bserver.New(e2bserver.Options{
				APIKeys:        keys,
				Config:         sandboxes.Config{Variant: "local", Memory: mem, CPU: cpu, IdleTimeout: sandboxes.NoIdleTimeout, Local: sandboxes.LocalConfig{RuntimeDir: runtimeDir}},
				DefaultNetwork: network,
				MaxTimeout:     maxTimeout,
				Logger:         slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})),
			})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			url := "http://" + ln.Addr().String()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "E2B_API_URL=%s\nE2B_SANDBOX_URL=%s\n", url, url)
			if generated {
				fmt.Fprintf(out, "E2B_API_KEY=%s\n", apiKey)
			}
			return srv.Run(cmd.Context(), ln, keep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:3000", "address to listen on (API and sandbox traffic)")
	f.StringVar(&keyFile, "api-key-file", "", "file of accepted API keys, one e2b_<hex> per line (# comments allowed); re-read only at start")
	f.StringVar(&apiKey, "api-key", "", "accepted API key, e2b_<hex> (default $E2B_API_KEY, else generated and printed)")
	f.StringVar(&runtimeDir, "runtime-dir", "", "where sandbox records live (default $CODE_SANDBOXES_RUNTIME_DIR, /run/code-sandboxes or $XDG_RUNTIME_DIR)")
	f.StringVar(&network, "default-network", sandboxes.NetworkNone, "network of sandboxes created without allowInternetAccess: none or all")
	f.StringVar(&memory, "memory", "", "memory limit of every sandbox, e.g. 512M or 2G")
	f.Float64Var(&cpu, "cpu", 0, "CPU limit of every sandbox, in cores")
	f.DurationVar(&maxTimeout, "max-timeout", 24*time.Hour, "longest sandbox timeout a client may ask for")
	f.BoolVar(&keep, "keep-sandboxes", false, "leave the sandboxes this server created running when it stops")
	f.BoolVar(&verbose, "verbose", false, "log every API call")
	return cmd
}

// readKeyFile reads API keys, one a line; blank lines and # comments skipped.
// A key file readable by others is refused: it holds credentials.
func readKeyFile(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--api-key-file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--api-key-file %s is readable by group or others (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--api-key-file: %w", err)
	}
	var keys []string
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !e2bserver.ValidAPIKey(line) {
			return nil, fmt.Errorf("--api-key-file %s line %d: not an E2B API key (e2b_ followed by lowercase hex)", path, i+1)
		}
		keys = append(keys, line)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--api-key-file %s holds no key", path)
	}
	return keys, nil
}
