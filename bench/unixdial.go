package main

import (
	"context"
	"net"
	"os/exec"
	"strings"
)

type netConn = net.Conn

func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

// pprofTop runs `go tool pprof -top` on a profile and keeps the first lines.
func pprofTop(path string, lines int) string {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", path).CombinedOutput()
	if err != nil {
		return "pprof failed: " + err.Error() + "\n" + string(out)
	}
	l := strings.Split(string(out), "\n")
	if len(l) > lines {
		l = l[:lines]
	}
	return strings.Join(l, "\n")
}
