package mountinfo

import "testing"

func TestParse(t *testing.T) {
	for _, c := range []struct {
		line string
		want Mount
		ok   bool
	}{
		{`36 35 98:0 /mnt1 /mnt/parent\040dir rw,noatime master:1 - ext3 /dev/root rw,errors=continue`,
			Mount{Point: "/mnt/parent dir", FSType: "ext3", Source: "/dev/root", Dev: "98:0"}, true},
		{`812 30 0:72 / /tmp/m rw,nosuid,nodev,relatime shared:400 - fuse.mlfsd oss://bkt/data/ rw,user_id=0`,
			Mount{Point: "/tmp/m", FSType: "fuse.mlfsd", Source: "oss://bkt/data/", Dev: "0:72"}, true},
		{`812 30 0:72 / /tmp/m rw`, Mount{}, false},
		{`garbage`, Mount{}, false},
		{`1 2 3:4 / /a\134b rw - tmpfs tmpfs rw`, Mount{Point: `/a\b`, FSType: "tmpfs", Source: "tmpfs", Dev: "3:4"}, true},
	} {
		got, ok := parse(c.line)
		if ok != c.ok || got != c.want {
			t.Errorf("parse(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// The root is always mounted: Lookup must find it in the real table.
func TestLookupRoot(t *testing.T) {
	m, ok, err := Lookup("/")
	if err != nil || !ok || m.FSType == "" {
		t.Fatalf("Lookup(/) = %+v, %v, %v", m, ok, err)
	}
	if _, ok, err := Lookup("/proc/self/no/such/mount"); err != nil || ok {
		t.Fatalf("Lookup of a non-mountpoint: %v, %v", ok, err)
	}
}
