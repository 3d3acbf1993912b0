package fs_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// forkedWriterEnv makes the test binary a writer with children: see
// forkedWriter.
const forkedWriterEnv = "MLFSD_TEST_FORKED_WRITER"

// forkedWriter creates path and writes half of it, then runs two children
// that share the open file: /bin/true, which closes the descriptor at exec
// (Go opens files close-on-exec), and /bin/true with the file as its
// descriptor 3, which closes it at its exit. Then it says "ready", waits
// for a line on stdin, writes the rest and closes: only that close is the
// writer's own. It exits the process.
func forkedWriter(path string) {
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		fail(err)
	}
	if _, err := f.WriteString("half,"); err != nil {
		fail(err)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		fail(err)
	}
	child := exec.Command("/bin/true")
	child.ExtraFiles = []*os.File{f}
	if err := child.Run(); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fail(err)
	}
	if _, err := f.WriteString("rest"); err != nil {
		fail(err)
	}
	if err := f.Close(); err != nil {
		fail(err)
	}
	os.Exit(0)
}

// TestOutputForkedChildCloseDoesNotSeal: a child forked by the writer
// shares its open file and closes it at exec (close-on-exec) or at its
// exit. That close must not publish the file: once the children are gone
// and the Store is drained, the backend holds nothing under the name,
// though the writer has written half of it; the writer's own close then
// publishes all of it. Before, a child's FLUSH sealed and uploaded the
// half-written file.
func TestOutputForkedChildCloseDoesNotSeal(t *testing.T) {
	for _, mode := range ioModes {
		t.Run(mode.name, func(t *testing.T) {
			back := t.TempDir()
			m := testOutputMountMode(t, newNAS(t, back), t.TempDir(), nil, mode.noPassthrough)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0])
			cmd.Env = append(os.Environ(), forkedWriterEnv+"="+filepath.Join(m.mnt, "model.bin"))
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			out := bufio.NewReader(stdout)
			if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("writer: %q, %v", line, err)
			}
			must(t, m.st.Drain(ctx, nil))
			if b, err := os.ReadFile(filepath.Join(back, "model.bin")); err == nil {
				t.Errorf("a child's close published the half-written file: %q", b)
			} else if !os.IsNotExist(err) {
				t.Fatal(err)
			}

			if _, err := stdin.Write([]byte("go\n")); err != nil {
				t.Fatal(err)
			}
			rest, _ := out.ReadString(0)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("writer: %v: %s", err, rest)
			}
			must(t, m.st.Drain(ctx, nil))
			if b, err := os.ReadFile(filepath.Join(back, "model.bin")); err != nil || string(b) != "half,rest" {
				t.Errorf("after the writer's close, the backend holds %q, %v; want \"half,rest\"", b, err)
			}
		})
	}
}
