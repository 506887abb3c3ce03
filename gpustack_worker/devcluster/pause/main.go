// Command pause is the dev cluster's sandbox image: it holds a Pod's namespaces open.
//
// No registry is reachable, so the pause image the kubelet and containerd need is built here:
// it waits for SIGTERM or SIGINT and exits 0, and as PID 1 of the sandbox it reaps any child
// that is re-parented to it (SIGCHLD), so no zombie outlives its container.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
