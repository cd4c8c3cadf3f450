package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/indexify-go/indexify/internal/memlimit"
)

// cgroupRoot is where the container's cgroup is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// processContext is how every long-running process (dev, coordinator,
// server, executor) starts: the Go runtime gets the container's memory
// limit (internal/memlimit), and the context ends on SIGINT or SIGTERM.
func processContext() (context.Context, context.CancelFunc) {
	memlimit.Apply(cgroupRoot, slog.Default())
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
