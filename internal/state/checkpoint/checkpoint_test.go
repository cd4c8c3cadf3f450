package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// makeDir writes files (name -> content) into a new directory.
func makeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

var sample = map[string]string{
	"000004.sst":        strings.Repeat("sstable bytes ", 10000),
	"MANIFEST-000001":   "manifest",
	"OPTIONS-000003":    "[Options]",
	"marker.format.001": "",
}

func stream(t *testing.T, files map[string]string, applied uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, vfs.Default, makeDir(t, files), applied); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	b := stream(t, sample, 12345)
	if !IsCheckpoint(b) {
		t.Fatal("stream does not start with the magic")
	}
	dst := filepath.Join(t.TempDir(), "next")
	applied, err := Read(bytes.NewReader(b), vfs.Default, dst)
	if err != nil {
		t.Fatal(err)
	}
	if applied != 12345 {
		t.Fatalf("applied = %d, want 12345", applied)
	}
	got := readDir(t, dst)
	if len(got) != len(sample) {
		t.Fatalf("got %d files, want %d", len(got), len(sample))
	}
	for name, body := range sample {
		if got[name] != body {
			t.Fatalf("file %s differs", name)
		}
	}
	if exists(vfs.Default, dst+".part") {
		t.Fatal("partial directory left behind")
	}
	// Writing the same directory twice gives the same bytes (name order).
	if again := stream(t, sample, 12345); !bytes.Equal(again, b) {
		t.Fatal("stream of the same files differs between runs")
	}
}

// A format-1 snapshot starts with the uvarint length of a non-empty record.
func TestFormatOneIsNotACheckpoint(t *testing.T) {
	for _, n := range []uint64{1, 2, 127, 128, 1 << 20} {
		b := binary.AppendUvarint(nil, n)
		b = append(b, []byte(Magic)...)
		if IsCheckpoint(b) {
			t.Fatalf("format-1 prefix of length %d taken for a checkpoint", n)
		}
	}
}

func TestReadRejectsDamage(t *testing.T) {
	b := stream(t, sample, 7)
	cases := map[string][]byte{}
	for _, cut := range []int{0, 3, len(Magic), len(Magic) + 2, len(b) / 3, len(b) / 2, len(b) - sha256.Size - 1, len(b) - 1} {
		cases["truncated at "+strconv.Itoa(cut)] = b[:cut]
	}
	for _, at := range []int{len(Magic) + 5, len(b) / 2, len(b) - 3} {
		flipped := bytes.Clone(b)
		flipped[at] ^= 0x40
		cases["byte flipped at "+strconv.Itoa(at)] = flipped
	}
	cases["not a checkpoint"] = append([]byte{0x05, 0x01}, b[2:]...)
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "next")
			if _, err := Read(bytes.NewReader(in), vfs.Default, dst); err == nil {
				t.Fatal("damaged stream accepted")
			}
			if exists(vfs.Default, dst) || exists(vfs.Default, dst+".part") {
				t.Fatal("damaged stream left a directory behind")
			}
		})
	}
}

// handMade builds a stream with arbitrary names and a valid end record, to
// check that Read refuses names that would leave its directory.
func handMade(names ...string) []byte {
	var b []byte
	b = append(b, Magic...)
	b = binary.AppendUvarint(b, Format)
	b = binary.AppendUvarint(b, 1)
	for _, n := range names {
		b = append(b, recFile)
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		b = binary.AppendUvarint(b, 2)
		b = append(b, "hi"...)
	}
	b = append(b, recEnd)
	b = binary.AppendUvarint(b, uint64(len(names)))
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

func TestReadRejectsHostileNames(t *testing.T) {
	if _, err := Read(bytes.NewReader(handMade("ok")), vfs.Default, filepath.Join(t.TempDir(), "n")); err != nil {
		t.Fatalf("valid hand-made stream refused: %v", err)
	}
	for _, bad := range [][]string{{"../escape"}, {"a/b"}, {".."}, {"."}, {"x\x00y"}, {`a\b`}, {"dup", "dup"}} {
		root := t.TempDir()
		dst := filepath.Join(root, "sub", "next")
		if _, err := Read(bytes.NewReader(handMade(bad...)), vfs.Default, dst); err == nil {
			t.Fatalf("name %q accepted", bad)
		}
		if exists(vfs.Default, filepath.Join(root, "sub", "escape")) || exists(vfs.Default, filepath.Join(root, "escape")) {
			t.Fatalf("name %q wrote outside the directory", bad)
		}
	}
}

func TestReadRefusesExistingDir(t *testing.T) {
	dst := makeDir(t, map[string]string{"keep": "me"})
	if _, err := Read(bytes.NewReader(stream(t, sample, 1)), vfs.Default, dst); err == nil {
		t.Fatal("Read overwrote an existing directory")
	}
	if readDir(t, dst)["keep"] != "me" {
		t.Fatal("existing directory changed")
	}
}

func TestWriteRefusesSubdirectories(t *testing.T) {
	dir := makeDir(t, sample)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, vfs.Default, dir, 1); err == nil {
		t.Fatal("Write accepted a nested directory")
	}
}

// install prepares root/state (old content) and root/state.next (new).
func install(t *testing.T) (root, next, live string) {
	t.Helper()
	root = t.TempDir()
	next, live = filepath.Join(root, "state.next"), filepath.Join(root, "state")
	if err := os.Mkdir(live, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(live, "f"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(bytes.NewReader(handMade("f")), vfs.Default, next); err != nil {
		t.Fatal(err)
	}
	return root, next, live
}

func liveIs(t *testing.T, live, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(live, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Fatalf("live holds %q, want %q", b, want)
	}
}

func TestInstallSwaps(t *testing.T) {
	root, next, live := install(t)
	if err := Install(vfs.Default, next, live); err != nil {
		t.Fatal(err)
	}
	liveIs(t, live, "hi")
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

// Each crash point of Install, then Recover, ends with exactly one of the
// two states live and nothing else.
func TestRecoverAfterCrash(t *testing.T) {
	t.Run("received, not installed", func(t *testing.T) {
		_, next, live := install(t)
		if err := Recover(vfs.Default, next, live); err != nil {
			t.Fatal(err)
		}
		liveIs(t, live, "old")
		if exists(vfs.Default, next) {
			t.Fatal("uninstalled checkpoint kept")
		}
	})
	t.Run("between the renames", func(t *testing.T) {
		_, next, live := install(t)
		if err := os.Rename(live, live+".old"); err != nil {
			t.Fatal(err)
		}
		if err := Recover(vfs.Default, next, live); err != nil {
			t.Fatal(err)
		}
		liveIs(t, live, "hi")
		if exists(vfs.Default, live+".old") || exists(vfs.Default, next) {
			t.Fatal("leftovers after recovery")
		}
	})
	t.Run("before removing old", func(t *testing.T) {
		_, next, live := install(t)
		if err := os.Rename(live, live+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(next, live); err != nil {
			t.Fatal(err)
		}
		if err := Recover(vfs.Default, next, live); err != nil {
			t.Fatal(err)
		}
		liveIs(t, live, "hi")
		if exists(vfs.Default, live+".old") {
			t.Fatal("old state kept")
		}
	})
	t.Run("partial receive on a fresh node", func(t *testing.T) {
		root := t.TempDir()
		next, live := filepath.Join(root, "state.next"), filepath.Join(root, "state")
		if err := os.Mkdir(next+".part", 0o700); err != nil {
			t.Fatal(err)
		}
		if err := Recover(vfs.Default, next, live); err != nil {
			t.Fatal(err)
		}
		if exists(vfs.Default, live) || exists(vfs.Default, next+".part") {
			t.Fatal("a partial receive became state")
		}
	})
}
