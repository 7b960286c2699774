//go:build !localonly

package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/internal/mcpserver"
	"github.com/code-sandboxes/code-sandboxes/mcptools"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

func mcpCmd() *cobra.Command {
	var c common
	var listen, token, maxNetwork string
	var idle time.Duration
	var maxSessions int
	var toolServers, toolNames []string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the Model Context Protocol (stdio, or streamable HTTP with --listen): run code, commands and files in a sandbox per session",
		Example: `  code-sandboxes mcp                              # stdio, for a client that starts it
  code-sandboxes mcp --listen 127.0.0.1:8080      # streamable HTTP at http://127.0.0.1:8080/mcp
  code-sandboxes mcp --tool-server "my-mcp-server --stdio" --tool search
                                                  # run_code's code can call tools.search(...)

With --listen every request needs Authorization: Bearer <token>: --token,
else $CODE_SANDBOXES_MCP_TOKEN, else one is generated and printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			// The operator's ceiling (as serve's): every session's sandbox
			// gets --network, and an MCP client can't ask for another, so
			// checking --network once, here, bounds them all.
			if err := e2bserver.CheckNetworkCeiling(sandboxes.Network{Policy: cfg.NetworkPolicy, AllowedHosts: cfg.AllowedHosts, DeniedHosts: cfg.DeniedHosts}, maxNetwork, "--max-network"); err != nil {
				return fmt.Errorf("mcp: --network %s: %w", cmp.Or(cfg.NetworkPolicy, sandboxes.NetworkNone), err)
			}
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			var tools []sandboxes.Tool
			if len(toolServers) > 0 {
				dctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
				var closeTools func()
				tools, closeTools, err = mcptools.FromServers(dctx, toolServers, toolNames)
				cancel()
				if err != nil {
					return fmt.Errorf("mcp: --tool-server: %w", err)
				}
				defer closeTools()
			} else if len(toolNames) > 0 {
				return errors.New("mcp: --tool names tools of the servers given with --tool-server; give one")
			}
			srv := mcpserver.New(mcpserver.Options{Config: cfg, ExecTimeout: c.timeout, Version: version, Logger: logger, Tools: tools})
			defer srv.Close()
			ctx := cmd.Context()
			if listen == "" {
				err := srv.Run(ctx, &mcp.StdioTransport{})
				if errors.Is(err, context.Canceled) {
					return nil
				}
				return err
			}
			generated := false
			if token == "" {
				token = os.Getenv("CODE_SANDBOXES_MCP_TOKEN")
			}
			if token == "" {
				var b [24]byte
				_, _ = rand.Read(b[:])
				token, generated = hex.EncodeToString(b[:]), true
			}
			h, err := srv.HTTPHandler(mcpserver.HTTPOptions{Token: token, MaxSessions: maxSessions, Idle: idle})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("mcp: listen: %w", err)
			}
			mux := http.NewServeMux()
			mux.Handle("/mcp", h)
			hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(cmd.ErrOrStderr(), "MCP (streamable HTTP) at http://%s/mcp\n", ln.Addr())
			if generated {
				fmt.Fprintf(cmd.OutOrStdout(), "CODE_SANDBOXES_MCP_TOKEN=%s\n", token)
			}
			errc := make(chan error, 1)
			go func() { errc <- hs.Serve(ln) }()
			select {
			case err := <-errc:
				return fmt.Errorf("mcp: serve: %w", err)
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = hs.Shutdown(sctx)
				return nil
			}
		},
	}
	c.flags(cmd, true)
	cmd.Flags().StringVar(&listen, "listen", "", "serve streamable HTTP on this address (path /mcp) instead of stdio")
	cmd.Flags().DurationVar(&idle, "session-idle", 30*time.Minute, "HTTP: end (and kill the sandbox of) a session idle this long (0 = never)")
	cmd.Flags().StringVar(&token, "token", "", "HTTP: bearer token clients must send (default $CODE_SANDBOXES_MCP_TOKEN, else generated and printed)")
	cmd.Flags().StringArrayVar(&toolServers, "tool-server", nil, "expose the tools of this MCP server to the code run_code runs (import tools): an http(s):// URL (streamable HTTP) or a command line serving MCP on stdio (split on spaces, no shell); repeatable")
	cmd.Flags().StringSliceVar(&toolNames, "tool", nil, "grant only these tools of the --tool-server servers (default: all); repeatable or comma-separated")
	cmd.Flags().StringVar(&maxNetwork, "max-network", sandboxes.NetworkAll, "the most network --network may give the sessions' sandboxes: none, allowlist or all; above it mcp refuses to start")
	cmd.Flags().IntVar(&maxSessions, "max-sessions", 16, "HTTP: sessions (each with its sandbox) open at once")
	return cmd
}
