// Package durable holds the one file-system rule every store here follows
// after creating, renaming or removing a file: sync the directory that
// holds it, or the change may not survive a power loss (the file's own
// fsync does not cover its directory entry).
package durable

import (
	"fmt"
	"os"
)

// SyncDir makes the creation, rename or removal of entries in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
