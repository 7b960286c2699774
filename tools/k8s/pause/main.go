// Command pause is the pod-sandbox ("infra") process of the local test
// cluster that scripts/k8s-cluster.sh runs. It holds the pod's namespaces
// open: it sleeps, reaps any orphan that gets re-parented to it (it is PID 1
// of the pod), and exits 0 on SIGTERM or SIGINT. It is built statically
// (CGO_ENABLED=0) and packed alone into the image registry.k8s.io/pause:local,
// so the cluster needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
