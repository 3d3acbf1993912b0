package mounthelper

import (
	"strings"
	"testing"
)

func TestParseOptions(t *testing.T) {
	h, err := ParseOptions([]string{"ro,cache_dir=/var/cache/x,no_passthrough,x-systemd.automount,_netdev,noauto,comment=a", "oss_part_size=16MiB"})
	if err != nil {
		t.Fatal(err)
	}
	if !h.ReadOnly || h.Daemon != "" {
		t.Errorf("ro/daemon: %+v", h)
	}
	want := []string{"--cache-dir=/var/cache/x", "--no-passthrough=true", "--oss-part-size=16MiB"}
	if strings.Join(h.Flags, " ") != strings.Join(want, " ") {
		t.Errorf("flags %v, want %v", h.Flags, want)
	}
	if len(h.MountOptions) != 1 || h.MountOptions["oss-part-size"] != "16MiB" {
		t.Errorf("mount-scope options %v", h.MountOptions)
	}
	h, err = ParseOptions([]string{"daemon=/run/mlfsd/api.sock,upload_concurrency=8,uhelper=mlfsd"})
	if err != nil || h.Daemon != "/run/mlfsd/api.sock" || h.ReadOnly || h.MountOptions["upload-concurrency"] != "8" || !h.UHelper {
		t.Errorf("daemon options: %+v, %v", h, err)
	}
	// An fstab line as s3fs, ossfs and rclone users write it.
	h, err = ParseOptions([]string{"ro,allow_other,uid=1000,gid=1000,umask=022,file_mode=0440,dir_mode=0550,allow_empty,_netdev,nosuid,nodev,noatime,defaults,noauto,user"})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"--allow-other=true", "--uid=1000", "--gid=1000", "--umask=022", "--file-mode=0440", "--dir-mode=0550", "--allow-empty=true"}
	if !h.ReadOnly || strings.Join(h.Flags, " ") != strings.Join(want, " ") {
		t.Errorf("fstab line: ro %v, flags %v, want %v", h.ReadOnly, h.Flags, want)
	}
	if len(h.MountOptions) != len(want) || h.MountOptions["file-mode"] != "0440" || h.MountOptions["allow-other"] != "true" {
		t.Errorf("fstab line: mount options %v (all mount-scope, for a daemon)", h.MountOptions)
	}
	for opts, want := range map[string]string{
		"uid=alice":               "uid",
		"file_mode=0999":          "file_mode",
		"suid":                    "nosuid",
		"dev":                     "nodev",
		"sync":                    "fsync_durable",
		"noexec":                  "noexec",
		"oss_access_key_secret=x": "oss_access_key_secret", // credentials never in options
		"cache_memory":            "cache_memory",          // needs a value
		"daemon=":                 "daemon",
		"log_file=rel.log":        "log_file",
	} {
		if _, err := ParseOptions([]string{opts}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-o %s: %v, want an error naming %s", opts, err, want)
		}
	}
}
