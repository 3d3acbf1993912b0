package job

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Identity is the user a job's command runs as (mlfsd run --run-as), so a
// job cannot read what mlfsd holds: processes of another user may not read
// mlfsd's /proc/<pid>/environ or memory.
type Identity struct {
	Name   string // user name, for USER and LOGNAME
	UID    uint32
	GID    uint32   // primary group
	Groups []uint32 // supplementary groups
	Home   string   // HOME
}

// LookupIdentity resolves a user name or numeric uid through the system's
// user database: its primary group, supplementary groups and home. A
// numeric uid unknown to the database is used as is, with gid = uid, no
// supplementary groups and HOME=/.
func LookupIdentity(name string) (*Identity, error) {
	if name == "" {
		return nil, fmt.Errorf("run as: empty user name")
	}
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		u, uerr = user.LookupId(name)
		if uerr != nil {
			n, perr := strconv.ParseUint(name, 10, 32)
			if perr != nil {
				return nil, fmt.Errorf("run as %q: %w", name, err)
			}
			return &Identity{Name: name, UID: uint32(n), GID: uint32(n), Home: "/"}, nil
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("run as %q: uid %q is not a number", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("run as %q: gid %q is not a number", name, u.Gid)
	}
	id := &Identity{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("run as %q: supplementary groups: %w", name, err)
	}
	for _, g := range gids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("run as %q: group id %q is not a number", name, g)
		}
		if uint32(n) != id.GID {
			id.Groups = append(id.Groups, uint32(n))
		}
	}
	if id.Home == "" {
		id.Home = "/"
	}
	return id, nil
}

// credential is the process credential of the command.
func (id *Identity) credential() *syscall.Credential {
	return &syscall.Credential{Uid: id.UID, Gid: id.GID, Groups: id.Groups}
}

// env overrides the user variables of env for id.
func (id *Identity) env(env []string) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "HOME", "USER", "LOGNAME":
		default:
			out = append(out, kv)
		}
	}
	return append(out, "HOME="+id.Home, "USER="+id.Name, "LOGNAME="+id.Name)
}

// checkRunAs refuses --run-as when mlfsd cannot change its user.
func checkRunAs(id *Identity) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as %s (uid %d): mlfsd must run as root to start the command as another user", id.Name, id.UID)
	}
	return nil
}

// giveWorkingDir hands the working directory (and the code copied into it)
// to id, so the command can write where it runs, as it could as root.
func giveWorkingDir(dir string, id *Identity) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(id.UID), int(id.GID))
	})
}
