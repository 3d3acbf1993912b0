package mounthelper

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mlfsd/mlfsd/node"
)

// Options is a parsed -o option string.
type Options struct {
	// ReadOnly: ro was given, an input; otherwise an output.
	ReadOnly bool
	// UHelper: uhelper= was given, so mount(8) records the mount in utab
	// itself (RegisterUmount is not needed).
	UHelper bool
	// Daemon is the node daemon's API socket (daemon=), or "".
	Daemon string
	// LogFile is where a detached `mlfsd mount` logs (log_file=), or "".
	LogFile string
	// Flags are the options as --name=value flags of `mlfsd mount`.
	Flags []string
	// MountOptions are the mount-scope options by table name, for a
	// mount request to the daemon.
	MountOptions map[string]string
	nodeOpts     []string // node-scope option names (refused with daemon=)
}

// ignoredMountOptions are generic options mount(8) and fstab carry that
// need nothing of mlfsd: mount(8) acts on them itself (auto, noauto, user,
// users, owner, group, _netdev, nofail), they are what an mlfsd mount
// always is (rw without ro, nosuid, nodev, exec, async), or they concern
// access times, which mlfsd does not keep on inputs and keeps per mount on
// outputs (see README, "Mount options").
var ignoredMountOptions = map[string]bool{
	"rw": true, "defaults": true, "auto": true, "noauto": true, "user": true, "nouser": true,
	"users": true, "_netdev": true, "nofail": true, "exec": true,
	"nosuid": true, "nodev": true, "atime": true, "noatime": true,
	"relatime": true, "norelatime": true, "strictatime": true, "nodiratime": true,
	"diratime": true, "async": true, "owner": true, "group": true, "loud": true,
	"helper": true,
}

// refusedMountOptions are generic options an mlfsd mount cannot honour,
// with why: accepting them would promise what does not happen.
var refusedMountOptions = map[string]string{
	"suid":    "mlfsd mounts are always nosuid: a file from a store must not gain privileges on the node",
	"dev":     "mlfsd mounts are always nodev: a store holds no device nodes the node should open",
	"noexec":  "not supported: input files keep their execute bits, and output files are programs' own",
	"sync":    "writes to an output are staged and uploaded in the background; for durability use fsync_durable (fsync returns once the file is in the store) or staging_fsync",
	"dirsync": "directory changes on an output are uploaded in the background (see README, Semantics)",
	"mand":    "mandatory locks are not supported",
}

// ParseOptions maps -o options to mlfsd flags: ro (an input; without
// it, an output), daemon=SOCKET, log_file=PATH, and every option of the
// options table with '_' for '-' (cache_dir=..., cache_memory=4GiB,
// upload_concurrency=8, no_passthrough, allow_other, uid=1000,
// file_mode=0440). Generic options mlfsd needs nothing for are accepted,
// those it cannot honour refused saying why. Values are validated here, so a
// bad fstab line fails before anything starts. Unknown options are errors
// naming them; credentials cannot be given here (they would show in
// /proc/PID/cmdline and in fstab): use oss_credentials_file.
func ParseOptions(list []string) (Options, error) {
	h := Options{MountOptions: map[string]string{}}
	table := map[string]node.Option{}
	for _, o := range node.Table() {
		table[o.Name] = o
	}
	for _, group := range list {
		for _, o := range splitOptions(group) {
			name, val, hasVal := strings.Cut(o, "=")
			switch {
			case o == "":
				continue
			case name == "ro" && !hasVal:
				h.ReadOnly = true
				continue
			case name == "uhelper":
				h.UHelper = true
				continue
			case ignoredMountOptions[name] || strings.HasPrefix(name, "x-") || name == "comment":
				continue
			case refusedMountOptions[name] != "" && !hasVal:
				return h, fmt.Errorf("-o %s: %s; remove it from the options", name, refusedMountOptions[name])
			case name == "daemon":
				if !hasVal || val == "" {
					return h, errors.New("-o daemon: want daemon=/path/to/mlfsd.sock")
				}
				h.Daemon = val
				continue
			case name == "log_file":
				if !hasVal || !filepath.IsAbs(val) {
					return h, errors.New("-o log_file: want log_file=/absolute/path")
				}
				h.LogFile = val
				continue
			}
			flag := strings.ReplaceAll(name, "_", "-")
			opt, ok := table[flag]
			if !ok {
				return h, fmt.Errorf("-o %s: unknown mlfsd mount option (want ro, daemon=, log_file=, or an mlfsd flag with '_' for '-', e.g. cache_dir=, upload_concurrency=)", name)
			}
			if !hasVal {
				if opt.Kind != "bool" {
					return h, fmt.Errorf("-o %s: needs a value (%s=...)", name, name)
				}
				val = "true"
			}
			s := node.Defaults()
			if err := opt.Set(&s, val); err != nil {
				return h, fmt.Errorf("-o %s: %w", name, err)
			}
			h.Flags = append(h.Flags, "--"+flag+"="+val)
			if opt.Scope == node.ScopeMount {
				h.MountOptions[flag] = val
			} else {
				h.nodeOpts = append(h.nodeOpts, name)
			}
		}
	}
	if h.Daemon != "" && len(h.nodeOpts) > 0 {
		return h, fmt.Errorf("-o %s: node settings of the daemon at %s; set them on `mlfsd daemon`, not per mount", strings.Join(h.nodeOpts, ","), h.Daemon)
	}
	return h, nil
}

// splitOptions splits a comma-separated option list; a value may hold a
// comma when quoted ("x=\"a,b\"").
func splitOptions(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	return append(out, cur.String())
}
