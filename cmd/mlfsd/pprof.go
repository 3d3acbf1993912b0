package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
)

// pprofAddrEnv names the variable that, when set, has this process serve
// net/http/pprof on that address, for profiling a mount or daemon while a
// benchmark drives it (`go tool pprof http://ADDR/debug/pprof/profile`).
// An environment variable rather than a flag: cachebench and bench/compare
// start mounts whose command lines they build, and profiling is a
// developer's knob, not an interface.
const pprofAddrEnv = "MLFSD_PPROF_ADDR"

// startPprof serves the profiling endpoints on $MLFSD_PPROF_ADDR, if set,
// for the life of the process. Only loopback addresses are accepted: the
// endpoints show memory (which holds credentials) to whoever connects.
func (a *app) startPprof() error {
	addr := os.Getenv(pprofAddrEnv)
	if addr == "" {
		return nil
	}
	if err := checkPprofAddr(addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", pprofAddrEnv, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", httppprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	a.log.Info("serving pprof", "addr", ln.Addr().String())
	go func() {
		if err := http.Serve(ln, mux); err != nil && !errors.Is(err, net.ErrClosed) {
			a.log.Warn("pprof server stopped", "err", err)
		}
	}()
	return nil
}

// checkPprofAddr accepts host:port with a loopback host only.
func checkPprofAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", pprofAddrEnv, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s=%q: only a loopback address may serve profiles", pprofAddrEnv, addr)
	}
	return nil
}
