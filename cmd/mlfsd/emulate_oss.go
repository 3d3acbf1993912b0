package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

func newEmulateOSSCmd(a *app) *cobra.Command {
	var (
		root, listen, bandwidth, kinds string
		ttfb                           time.Duration
		rate                           float64
		seed                           uint64
	)
	c := &cobra.Command{
		Use:   "oss --root DIR [--listen 127.0.0.1:9000]",
		Short: "Serve a directory over the OSS protocol (and S3, path-style)",
		Long: `Serve DIR over the OSS REST protocol, well enough for the aliyun SDK, and over the
S3 REST protocol (path-style) for rclone and s3fs. Each top-level directory of DIR
is a bucket and each object a plain file under it. Any access key is accepted.

Point mlfsd at it with --oss-endpoint http://ADDR (or oss://bucket.ADDR/prefix/)
and any OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET. Request counters are served
as JSON at http://ADDR` + ossemu.StatsPath + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if root == "" {
				return errors.New("emulate oss: --root DIR is required")
			}
			opt := ossemu.Options{TTFB: ttfb, ErrorRate: rate, Seed: seed, Log: a.log}
			if bandwidth != "" {
				n, err := humanize.ParseBytes(strings.TrimSuffix(strings.TrimSpace(bandwidth), "/s"))
				if err != nil {
					return fmt.Errorf("--conn-bandwidth %q: want bytes per second like 100MB/s", bandwidth)
				}
				opt.ConnBandwidth = int64(n)
			}
			k, err := ossemu.ParseFaultKinds(kinds)
			if err != nil {
				return fmt.Errorf("--error-kinds: %w", err)
			}
			opt.ErrorKinds = k
			srv, err := ossemu.New(root, opt)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("emulate oss: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a.log.Info("OSS emulator serving", "addr", l.Addr().String(), "endpoint", "http://"+l.Addr().String(),
				"root", srv.Root(), "ttfb", ttfb, "conn_bandwidth", opt.ConnBandwidth, "error_rate", rate, "error_kinds", kinds, "seed", seed)
			if err := srv.Serve(ctx, l); err != nil {
				return fmt.Errorf("emulate oss: %w", err)
			}
			a.log.Info("OSS emulator stopped")
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&root, "root", "", "directory to serve: DIR/<bucket>/<key>")
	f.StringVar(&listen, "listen", "127.0.0.1:9000", "address to listen on (port 0 picks a free port)")
	f.DurationVar(&ttfb, "ttfb", 0, "delay before the first byte of every response, e.g. 20ms")
	f.StringVar(&bandwidth, "conn-bandwidth", "", "bandwidth per connection and direction, e.g. 100MB/s (default unlimited)")
	f.Float64Var(&rate, "error-rate", 0, "probability (0..1) that a request fails with one of --error-kinds")
	f.StringVar(&kinds, "error-kinds", "all", "kinds of failure to inject: comma-separated 500, 503, reset, truncate, or all")
	f.Uint64Var(&seed, "seed", 1, "seed of the fault generator")
	return c
}
