// Package k8stest gives tests the Kubernetes cluster scripts/with-k8s.sh
// brings up (KUBECONFIG), with the built "python" environment imported into
// it as an image whose agent is the running test binary (so it must be
// static: CGO_ENABLED=0, as make test sets). The root package's kubernetes
// tests and the hostile suite share it.
package k8stest

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// Env is the cluster: a client and the imported image's tag.
type Env struct {
	CS    k8s.Interface
	Image string
}

var (
	once     sync.Once
	setup    *Env
	setupErr error
)

// Cache keeps exported images between runs: the export takes about a
// minute, and its input (the test binary, the build) rarely changes.
const Cache = "/tmp/code-sandboxes-k8s-test"

// Cluster returns the cluster with the python environment imported (once
// per test binary); without a cluster it skips (fails with CI=true).
func Cluster(t *testing.T) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("creates pods")
	}
	sandboxestest.Require(t, os.Getenv("KUBECONFIG") != "", "a Kubernetes cluster (KUBECONFIG): run the tests under scripts/with-k8s.sh (make test does)")
	sandboxestest.Require(t, os.Getenv("CODE_SANDBOXES_K8S_IMPORT") != "", "a way to load images into the cluster ($CODE_SANDBOXES_K8S_IMPORT, set by scripts/with-k8s.sh)")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	static := !slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	f.Close()
	sandboxestest.Require(t, static, "a static test binary (it is the pods' agent): run the kubernetes tests with CGO_ENABLED=0 (make test does)")
	st, err := environment.Open("")
	if err != nil {
		t.Fatal(err)
	}
	// The variant never builds; its tests do, once per machine (the
	// other variants build it on first use as well).
	bctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b, err := st.Ensure(bctx, "python", environment.BuildOptions{Progress: os.Stderr})
	cancel()
	sandboxestest.Require(t, err == nil, fmt.Sprintf("the python environment built on this machine (code-sandboxes environments build python): %v", err))
	once.Do(func() { setup, setupErr = setupCluster(exe, b) })
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return setup
}

func setupCluster(exe string, b *environment.Build) (*Env, error) {
	raw, err := os.ReadFile(exe)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append(raw, b.ID...))
	tarPath := filepath.Join(Cache, hex.EncodeToString(sum[:8])+".tar")
	tag := environment.ImageTag(b)
	if _, err := os.Stat(tarPath); err != nil {
		if err := os.MkdirAll(Cache, 0o755); err != nil {
			return nil, err
		}
		old, _ := filepath.Glob(filepath.Join(Cache, "*.tar"))
		for _, o := range old {
			os.Remove(o)
		}
		start := time.Now()
		tmp := tarPath + ".tmp"
		// The export reads the rootfs twice (digest, then write); a
		// concurrent reader of the store changing atimes between the two
		// makes them disagree ("archive/tar: write too long"), so retry.
		for attempt := 1; ; attempt++ {
			out, err := os.Create(tmp)
			if err != nil {
				return nil, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			err = environment.WriteImageTar(ctx, b, tag, []environment.ExtraFile{{Path: environment.AgentPath, HostPath: exe, Mode: 0o755}}, out)
			cancel()
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				break
			}
			os.Remove(tmp)
			if attempt == 3 {
				return nil, fmt.Errorf("exporting the python environment: %w", err)
			}
			fmt.Fprintf(os.Stderr, "kubernetes tests: export attempt %d: %v; retrying\n", attempt, err)
		}
		if err := os.Rename(tmp, tarPath); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "kubernetes tests: exported %s in %s\n", tag, time.Since(start).Round(time.Millisecond))
	}
	start := time.Now()
	argv := append(strings.Fields(os.Getenv("CODE_SANDBOXES_K8S_IMPORT")), tarPath)
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("importing %s: %v: %s", tarPath, err, out)
	}
	fmt.Fprintf(os.Stderr, "kubernetes tests: imported %s in %s\n", tag, time.Since(start).Round(time.Millisecond))
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return nil, err
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Env{CS: cs, Image: tag}, nil
}
