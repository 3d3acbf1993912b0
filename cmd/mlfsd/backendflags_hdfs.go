package main

import (
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/backends/hdfs"
)

// addHDFSFlags registers the HDFS backend's flags. Authentication is
// SIMPLE: the user is a name, not a secret.
func addHDFSFlags(fs *pflag.FlagSet, o *hdfs.Options) {
	fs.StringVar(&o.User, "hdfs-user", "", "HDFS user to act as (default $HADOOP_USER_NAME, then the current user)")
	fs.StringSliceVar(&o.Namenodes, "hdfs-namenodes", nil, "HDFS NameNode addresses host:port, comma-separated (HA); replaces the hosts of hdfs:// URIs")
	fs.StringVar(&o.ConfDir, "hdfs-conf-dir", "", "Hadoop configuration directory, to resolve HA nameservices in hdfs:// URIs (default $HADOOP_CONF_DIR)")
	fs.IntVar(&o.Retries, "hdfs-retries", 0, "attempts for an HDFS operation that fails transiently (default 5)")
}
