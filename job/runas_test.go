package job

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestRunAsCannotReadDaemonEnviron: a job started with RunAs runs as that
// user, with its groups and HOME, may write in its working directory, and
// cannot read the environment of the process that started it (mlfsd, which
// holds the storage credentials).
func TestRunAsCannotReadDaemonEnviron(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs a command as uid 65534 and needs root")
	}
	const spec = `name: run as
command: 'id -u; id -g; echo "home=$HOME user=$USER"; touch made-by-job && echo wrote; if cat /proc/$DAEMON_PID/environ >/dev/null 2>&1; then echo environ=readable; else echo environ=denied; fi'
`
	r, _, out := newRunner(t, spec)
	// The temporary root is private to root (0700): let the job reach
	// its working directory.
	for d := r.Plan.Root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.Environ = append(r.Environ, "DAEMON_PID="+strconv.Itoa(os.Getpid()), "HOME=/root", "USER=root")
	r.RunAs = &Identity{Name: "nobody", UID: 65534, GID: 65534, Groups: []uint32{65533}, Home: "/nonexistent"}
	status, err := r.Run(context.Background())
	if err != nil || status != 0 {
		t.Fatalf("Run = %d, %v. Output:\n%s", status, err, out)
	}
	want := "65534\n65534\nhome=/nonexistent user=nobody\nwrote\nenviron=denied\n"
	if got := out.String(); got != want {
		t.Errorf("job output:\n%s\nwant:\n%s", got, want)
	}
	fi, err := os.Stat(filepath.Join(r.Plan.WorkingDir(), "made-by-job"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
		t.Errorf("made-by-job owned by %d:%d, want 65534:65534", st.Uid, st.Gid)
	}
}

func TestLookupIdentity(t *testing.T) {
	id, err := LookupIdentity("root")
	if err != nil {
		t.Fatal(err)
	}
	if id.UID != 0 || id.GID != 0 || id.Home != "/root" || id.Name != "root" {
		t.Errorf("root = %+v", id)
	}
	id, err = LookupIdentity("65534")
	if err != nil || id.UID != 65534 {
		t.Errorf("65534 = %+v, %v", id, err)
	}
	id, err = LookupIdentity("4242424")
	if err != nil || id.UID != 4242424 || id.GID != 4242424 || id.Home != "/" {
		t.Errorf("an unknown numeric uid = %+v, %v", id, err)
	}
	if _, err := LookupIdentity("no-such-user-xyz"); err == nil || !strings.Contains(err.Error(), "no-such-user-xyz") {
		t.Errorf("unknown user: %v", err)
	}
}
