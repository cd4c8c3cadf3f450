package docker

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveImage()
	removeVersityImage()
	os.Exit(code)
}
