package hostile_test

import (
	"context"
	"fmt"
	"os"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

func ctxBG(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	_ = cancel // bounded by d; the tests are short-lived
	return ctx
}

// helperEnv makes this test binary a "creating process" that makes a
// sandbox, prints its id and dies without closing it (faults_test.go).
const helperEnv = "CS_HOSTILE_HELPER_RT"

func helperMain() bool {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		return false
	}
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: dir}, MaxLifetime: 8 * time.Second, Name: "orphan"}
	sb, err := sandboxes.Create(ctxBG(time.Minute), cfg)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if _, err := sb.RunCode(ctxBG(time.Minute), "orphan_state = 7"); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("id", sb.ID())
	os.Stdout.Sync()
	// Die the hard way: no Close, no Detach, no deferred cleanup.
	p, _ := os.FindProcess(os.Getpid())
	_ = p.Kill()
	select {}
}
