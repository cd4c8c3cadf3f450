package docker

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveImage()
	removeVersityImage()
	removeStoreImages()
	os.Exit(code)
}
