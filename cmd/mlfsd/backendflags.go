package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/backends/all"
)

// addBackendFlags registers the flags that configure backends. Secrets are
// never flags: they come from the environment or a credentials file, so they
// cannot show up in a process listing.
func addBackendFlags(fs *pflag.FlagSet, o *all.Options) {
	addOSSFlags(fs, &o.OSS)
	addHDFSFlags(fs, &o.HDFS)
	fs.Var(&connectTimeout{&o.OSS.ConnectTimeout, &o.HDFS.ConnectTimeout}, "connect-timeout",
		"bound on connecting to an OSS endpoint or HDFS namenode and getting its first answer; one that stays silent is reported by name (default 10s)")
}

// connectTimeout sets the connect timeout of every backend that has one.
type connectTimeout struct{ oss, hdfs *time.Duration }

func (c *connectTimeout) String() string {
	if c.oss == nil || *c.oss == 0 {
		return ""
	}
	return c.oss.String()
}

func (c *connectTimeout) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration like 10s: %q", v)
	}
	*c.oss, *c.hdfs = d, d
	return nil
}

func (c *connectTimeout) Type() string { return "duration" }
