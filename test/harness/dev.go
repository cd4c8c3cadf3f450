package harness

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
)

// Dev is a running `indexify dev` process on loopback ports.
type Dev struct {
	*Proc
	DataDir string
	API     *HTTP
	APIAddr string
	GRPC    string
	Health  string
	args    []string
	t       testing.TB
}

// StartDev runs `indexify dev` in dataDir with free ports plus extra flags,
// and waits until the API answers and the default namespace exists.
func StartDev(t testing.TB, dataDir string, extra ...string) *Dev {
	t.Helper()
	d := &Dev{DataDir: dataDir, t: t}
	port := func() string { return strconv.Itoa(FreePort(t, "127.0.0.1")) }
	d.APIAddr = "127.0.0.1:" + port()
	d.GRPC = "127.0.0.1:" + port()
	d.Health = "127.0.0.1:" + port()
	raft := "127.0.0.1:" + port()
	d.args = append([]string{"dev",
		"--data-dir", dataDir,
		"--node-id", "dev-0",
		"--api-addr", d.APIAddr,
		"--coordinator-addr", d.GRPC,
		"--coordinator-http-addr", d.Health,
		"--raft-addr", raft,
	}, extra...)
	d.start()
	return d
}

func (d *Dev) start() {
	d.t.Helper()
	d.Proc = Start(d.t, "indexify-dev", d.args...)
	d.API = NewHTTP("http://" + d.APIAddr)
	Eventually(d.t, 60*time.Second, "indexify dev serves the default namespace", func() error {
		if d.Proc.Exited() {
			d.t.Fatalf("indexify dev exited:\n%s", d.Proc.Output())
		}
		var out wire.Namespaces
		code, body, err := d.API.JSON(http.MethodGet, "/namespaces", nil, &out)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET /namespaces: %d %s", code, body)
		}
		for _, n := range out.Namespaces {
			if n.Name == "default" {
				return nil
			}
		}
		return fmt.Errorf("no default namespace yet: %s", body)
	})
	// dev answers only once its executor is registered (cmd/indexify
	// dev_test.go proves it); this check stays as a cheap guard.
	Eventually(d.t, 30*time.Second, "indexify dev's executor registered", func() error {
		var out wire.Extractors
		code, body, err := d.API.JSON(http.MethodGet, "/extractors", nil, &out)
		if err != nil {
			return err
		}
		if code != http.StatusOK || len(out.Extractors) == 0 {
			return fmt.Errorf("GET /extractors: %d %s", code, body)
		}
		return nil
	})
}

// Restart stops the process with SIGTERM (falling back to SIGKILL) and starts
// it again with the same ports and data directory.
func (d *Dev) Restart() {
	d.t.Helper()
	d.Proc.Signal(15)
	if !d.Proc.Wait(30 * time.Second) {
		d.Proc.Kill()
	}
	d.start()
}
