package fs_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/writeback"
)

// errnoOf reduces an error to its errno ("" for success), so results on
// the mount and on a plain directory can be compared.
func errnoOf(err error) string {
	if err == nil {
		return "ok"
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return "other: " + err.Error()
}

// modelOp is one random operation; it runs on a root and describes what it
// saw, including data read back, so two roots can be compared.
type modelOp struct {
	desc string
	run  func(root string) string
}

func randomOp(r *rand.Rand) modelOp {
	dirs := []string{"", "d1", "d2", "d1/e"}
	names := []string{"a", "b", "c"}
	pick := func() string {
		d := dirs[r.IntN(len(dirs))]
		n := names[r.IntN(len(names))]
		if r.IntN(4) == 0 {
			n = []string{"d1", "d2", "e"}[r.IntN(3)]
		}
		return filepath.Join(d, n)
	}
	p, q := pick(), pick()
	data := make([]byte, []int{0, 1, 100, 5000, 70000, 300000}[r.IntN(6)])
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	off := int64(r.IntN(80000))
	size := int64(r.IntN(90000))
	target := []string{"a", "../b", "nowhere", "d1/e"}[r.IntN(4)]
	switch r.IntN(15) {
	case 14:
		return modelOp{"symlink " + p + " -> " + target, func(root string) string {
			return errnoOf(os.Symlink(target, filepath.Join(root, p)))
		}}
	case 0, 1:
		return modelOp{"write " + p, func(root string) string {
			return errnoOf(os.WriteFile(filepath.Join(root, p), data, 0o644))
		}}
	case 2:
		return modelOp{"append " + p, func(root string) string {
			f, err := os.OpenFile(filepath.Join(root, p), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return errnoOf(err)
			}
			_, err = f.Write(data)
			return errnoOf(errors.Join(err, f.Close()))
		}}
	case 3:
		return modelOp{fmt.Sprintf("pwrite %s@%d", p, off), func(root string) string {
			f, err := os.OpenFile(filepath.Join(root, p), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return errnoOf(err)
			}
			_, err = f.WriteAt(data, off)
			if err == nil && r.IntN(2) == 0 {
				err = f.Sync()
			}
			return errnoOf(errors.Join(err, f.Close()))
		}}
	case 4:
		return modelOp{fmt.Sprintf("truncate %s %d", p, size), func(root string) string {
			return errnoOf(os.Truncate(filepath.Join(root, p), size))
		}}
	case 5, 6:
		return modelOp{"read " + p, func(root string) string {
			b, err := os.ReadFile(filepath.Join(root, p))
			if err != nil {
				return errnoOf(err)
			}
			return fmt.Sprintf("ok %d %x", len(b), b[:min(len(b), 64)]) + fmt.Sprintf(" sum=%d", sum(b))
		}}
	case 7:
		return modelOp{"unlink " + p, func(root string) string { return errnoOf(syscall.Unlink(filepath.Join(root, p))) }}
	case 8:
		return modelOp{"mkdir " + p, func(root string) string { return errnoOf(syscall.Mkdir(filepath.Join(root, p), 0o755)) }}
	case 9:
		return modelOp{"rmdir " + p, func(root string) string { return errnoOf(syscall.Rmdir(filepath.Join(root, p))) }}
	case 10, 11:
		return modelOp{"rename " + p + " " + q, func(root string) string {
			return errnoOf(syscall.Rename(filepath.Join(root, p), filepath.Join(root, q)))
		}}
	case 12:
		return modelOp{"stat " + p, func(root string) string {
			st, err := os.Lstat(filepath.Join(root, p))
			if err != nil {
				return errnoOf(err)
			}
			if st.IsDir() {
				return "dir"
			}
			if st.Mode()&os.ModeSymlink != 0 {
				target, err := os.Readlink(filepath.Join(root, p))
				return fmt.Sprintf("link -> %s %v", target, err)
			}
			return fmt.Sprintf("%v %d", st.Mode().Type(), st.Size())
		}}
	default:
		d := dirs[r.IntN(len(dirs))]
		return modelOp{"readdir " + d, func(root string) string {
			ents, err := os.ReadDir(filepath.Join(root, d))
			if err != nil {
				return errnoOf(err)
			}
			var s []string
			for _, e := range ents {
				s = append(s, fmt.Sprintf("%s:%v", e.Name(), e.Type()))
			}
			sort.Strings(s)
			return strings.Join(s, ",")
		}}
	}
}

func sum(b []byte) (s uint64) {
	for i, c := range b {
		s += uint64(c) * uint64(i+1)
	}
	return s
}

// TestOutputModel runs the same random operations on an output mount and
// on a plain directory, comparing every result, then the trees, then what
// a fresh mount of the backend shows after the uploads.
func TestOutputModel(t *testing.T) {
	for i := 0; i < 4; i++ {
		seed, mode := uint64(i+1), ioModes[i%2]
		t.Run(fmt.Sprintf("seed%d-%s", seed, mode.name), func(t *testing.T) {
			model := t.TempDir()
			back := t.TempDir()
			small := func(o *writeback.Options) { o.StreamThreshold = 64 << 10 }
			m := testOutputMountMode(t, newNAS(t, back), t.TempDir(), small, mode.noPassthrough)
			for _, root := range []string{model, m.mnt} {
				for _, d := range []string{"d1/e", "d2"} {
					must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
				}
			}
			r1 := rand.New(rand.NewPCG(seed, 7))
			var log []string
			for i := 0; i < 400; i++ {
				op := randomOp(r1)
				want := op.run(model)
				got := op.run(m.mnt)
				log = append(log, op.desc+" -> "+want)
				if got != want {
					t.Fatalf("op %d %s: mount %q, plain dir %q\nlast ops:\n%s", i, op.desc, got, want,
						strings.Join(log[max(0, len(log)-15):], "\n"))
				}
			}
			okOps := 0
			for _, l := range log {
				if !strings.Contains(l, "-> no such") && !strings.Contains(l, "-> file exists") && !strings.Contains(l, "-> directory not empty") && !strings.Contains(l, "-> not a directory") && !strings.Contains(l, "-> is a directory") {
					okOps++
				}
			}
			t.Logf("%d of %d operations succeeded", okOps, len(log))
			want := tree(t, model)
			diffTrees(t, "mount vs model", tree(t, m.mnt), want)
			m.close(t)
			m2 := testOutputMount(t, newNAS(t, back), t.TempDir(), nil)
			diffTrees(t, "remount vs model", tree(t, m2.mnt), asRemounted(want))
		})
	}
}
