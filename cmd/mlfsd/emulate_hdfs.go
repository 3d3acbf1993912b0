package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/internal/ready"
)

func newEmulateHDFSCmd(a *app) *cobra.Command {
	var (
		opt                  hdfsemu.Options
		blockSize, bandwidth string
		keytab, principal    string
	)
	c := &cobra.Command{
		Use:   "hdfs --root DIR [--listen 127.0.0.1:8020]",
		Short: "Serve a directory over the HDFS protocol (NameNode + DataNode)",
		Long: `Serve DIR as an HDFS namespace: a NameNode (Hadoop RPC, ClientNamenodeProtocol)
at --listen and a DataNode (DataTransferProtocol) at --datanode-listen, well enough
for the Go HDFS client mlfsd uses. DIR's tree is the namespace: every file is an
HDFS file (cut into --block-size blocks) and every directory an HDFS directory, so
data can be seeded and checked with ordinary file tools.

Point mlfsd at it with hdfs://ADDR/path/. The NameNode URI is printed on stdout
once both servers listen. Authentication is SIMPLE (any user; --superuser is
exempt from permission checks, everyone else gets the tree's mode bits).

With --keytab and --principal the NameNode is secured as a Kerberized one:
clients must authenticate with SASL/GSSAPI, presenting a service ticket for
--principal that the keytab verifies; SIMPLE clients are refused. The user
that permission checks see is the principal's first component.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opt.Root == "" {
				return errors.New("emulate hdfs: --root DIR is required")
			}
			if blockSize != "" {
				n, err := humanize.ParseBytes(blockSize)
				if err != nil || n == 0 || n%512 != 0 || n > 1<<40 {
					return fmt.Errorf("--block-size %q: want a size that is a multiple of 512 bytes, like 128MiB or 64KiB", blockSize)
				}
				opt.BlockSize = int64(n)
			}
			if bandwidth != "" {
				n, err := humanize.ParseBytes(strings.TrimSuffix(strings.TrimSpace(bandwidth), "/s"))
				if err != nil {
					return fmt.Errorf("--conn-bandwidth %q: want bytes per second like 100MB/s", bandwidth)
				}
				opt.Faults.Bandwidth = int64(n)
			}
			if err := opt.Faults.Validate(); err != nil {
				return fmt.Errorf("emulate hdfs: %w", err)
			}
			if (keytab == "") != (principal == "") {
				return errors.New("emulate hdfs: --keytab and --principal go together (the NameNode's keytab and its nn/HOST@REALM principal)")
			}
			if keytab != "" {
				k, err := hdfsemu.LoadKerberos(keytab, principal)
				if err != nil {
					return fmt.Errorf("emulate hdfs: %w", err)
				}
				opt.Kerberos = k
			}
			if err := ready.Check(a.readyFile); err != nil {
				return err
			}
			opt.Log = a.log
			srv, err := hdfsemu.New(opt)
			if err != nil {
				return err
			}
			defer srv.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a.log.Info("HDFS emulator serving", "namenode", srv.Addr(), "datanode", srv.DataNodeAddr(),
				"root", opt.Root, "block_size", srv.BlockSize(), "ttfb", opt.Faults.TTFB,
				"conn_bandwidth", opt.Faults.Bandwidth, "error_rate", opt.Faults.ErrorRate,
				"drop_rate", opt.Faults.DropRate, "rpc_error_rate", opt.Faults.RPCErrorRate, "rpc_drop_rate", opt.Faults.RPCDropRate, "seed", opt.Faults.Seed,
				"kerberos_principal", principal)
			fmt.Fprintf(a.stdout, "hdfs://%s/\n", srv.Addr())
			if err := ready.Write(a.readyFile, ready.Info{Addr: srv.Addr(), DataNodeAddr: srv.DataNodeAddr()}); err != nil {
				return err
			}
			<-ctx.Done()
			srv.Close()
			a.log.Info("HDFS emulator stopped")
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&opt.Root, "root", "", "directory to serve as the namespace root /")
	f.StringVar(&opt.Listen, "listen", "127.0.0.1:8020", "NameNode address (port 0 picks a free port)")
	f.StringVar(&opt.DataNodeListen, "datanode-listen", "127.0.0.1:0", "DataNode address (clients learn it from the NameNode)")
	f.StringVar(&blockSize, "block-size", "128MiB", "HDFS block size (a multiple of 512 bytes)")
	f.IntVar(&opt.ListingLimit, "listing-limit", hdfsemu.DefaultListingLimit, "entries per getListing page (dfs.ls.limit)")
	f.StringVar(&opt.Superuser, "superuser", "", "HDFS superuser, exempt from permission checks (default: the user running the emulator)")
	f.StringVar(&keytab, "keytab", "", "keytab of the NameNode's principal: require Kerberos (SASL/GSSAPI) from every client")
	f.StringVar(&principal, "principal", "", "the NameNode's service principal nn/HOST@REALM (with --keytab)")
	f.BoolVar(&opt.SafeMode, "safe-mode", false, "start in safe mode: every namespace change fails with SafeModeException")
	f.DurationVar(&opt.Faults.TTFB, "ttfb", 0, "delay before every NameNode answer and the first byte of every block transfer, e.g. 20ms")
	f.StringVar(&bandwidth, "conn-bandwidth", "", "DataNode bandwidth per connection and direction, e.g. 100MB/s (default unlimited)")
	f.Float64Var(&opt.Faults.ErrorRate, "error-rate", 0, "probability (0..1) that a block read or write is refused with an ERROR status")
	f.Float64Var(&opt.Faults.DropRate, "drop-rate", 0, "probability (0..1) that the DataNode drops a block read or write connection mid-block")
	f.Float64Var(&opt.Faults.RPCErrorRate, "rpc-error-rate", 0, "probability (0..1) that a NameNode call fails with RetriableException")
	f.Float64Var(&opt.Faults.RPCDropRate, "rpc-drop-rate", 0, "probability (0..1) that the NameNode closes the connection instead of answering a call")
	f.Int64Var(&opt.Faults.Seed, "seed", 1, "seed of the fault generator (0 = time-based)")
	addReadyFileFlag(f, a)
	return c
}
