// Command indexify is the single binary of the Indexify control plane:
// coordinator, API server, executor, an all-in-one dev mode and operator
// commands. This file only wires flags to the packages under internal/.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "indexify:", err)
		os.Exit(1)
	}
}
