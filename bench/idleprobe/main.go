// Command idleprobe creates sandboxes for bench's memory section from a
// program that imports only the root package (the local variant), as a
// typical caller's program would: the supervisor and the agent are the
// calling binary re-executed, so what it links in counts in each sandbox.
//
//	idleprobe <runtime dir> <n>
//
// It creates n sandboxes, runs x = 1 in each, prints "ready" and waits for
// its stdin to close, then closes them.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: idleprobe <runtime dir> <n>")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: os.Args[1]}}
	var sbs []*sandboxes.Sandbox
	defer func() {
		for _, sb := range sbs {
			_ = sb.Close()
		}
	}()
	for i := 0; i < n; i++ {
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
		sbs = append(sbs, sb)
		if _, err := sb.RunCode(ctx, "x = 1"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
