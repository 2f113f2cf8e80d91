// Command pause holds a pod's namespaces: it waits for SIGINT or SIGTERM and exits 0, and as the
// first process of the pod's PID namespace it reaps every child that exits (a process whose parent
// died is re-parented to it). `pause -v` prints its version.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time (-X main.version=...).
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Printf("pause %s\n", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not the first process of its PID namespace")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for got := range signals {
		if got == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: shutting down, got %v\n", got)
		os.Exit(0)
	}
}

// reap collects every exited child; SIGCHLD signals may merge, so it loops until none is left.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
