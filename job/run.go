package job

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/mlfsd/mlfsd/backends"
)

// Mounter mounts channels; cmd/mlfsd implements it with FUSE mounts, tests
// with plain directories.
type Mounter interface {
	// MountInput mounts an input channel read-only at mountpoint (an
	// existing empty directory). A single-object channel shows its object
	// as mountpoint/<basename>.
	MountInput(ctx context.Context, ch Channel, mountpoint string) (Mounted, error)
	// MountOutput mounts an output channel read-write at mountpoint.
	MountOutput(ctx context.Context, ch Channel, mountpoint string) (Mounted, error)
}

// Mounted is a mounted channel.
type Mounted interface {
	// Drain blocks until every byte written so far is durable in the
	// channel's store (a no-op for inputs).
	Drain(ctx context.Context) error
	// Unmount detaches the mount and releases what it holds.
	Unmount() error
}

// Opener opens the backend of a URI; for a single-object URI it also
// returns the object's key (see backends/all.Open).
type Opener func(ctx context.Context, u backends.URI) (b backends.Backend, key string, err error)

// Exit statuses of Run besides the command's own.
const (
	// ExitOutputFailed: an output could not be made durable, or a channel
	// could not be unmounted. The command's own status is logged.
	ExitOutputFailed = 3
	// ExitCannotRun: the command was found but could not be started.
	ExitCannotRun = 126
	// ExitNotFound: the command was not found.
	ExitNotFound = 127
)

// Runner runs a plan: layout, hyperparameters.json, mounts, code, command,
// drain, unmount.
type Runner struct {
	Plan    *Plan
	Mounter Mounter
	// Open opens the code URI's backend; needed only when the plan has code.
	Open Opener
	// Command, when set, replaces the plan's command; Shell says it is one
	// string for `sh -c`.
	Command []string
	Shell   bool
	// Environ is the environment the job's variables are added to
	// (nil: os.Environ()).
	Environ []string
	// Withhold names variables removed from Environ before the job sees
	// it: the credentials mlfsd itself uses to reach storage.
	Withhold       []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Signals (the caller subscribes to SIGINT and SIGTERM) are forwarded
	// to the command's process group while it runs. One that arrives
	// before the command starts stops the job there; after it exits, a
	// second one aborts the drain.
	Signals <-chan os.Signal
	Log     *slog.Logger
	// RunAs, when set, is the user the command runs as (mlfsd must be
	// root); the working directory is handed to that user. Nil: mlfsd's
	// own user.
	RunAs *Identity
	// DetachStale, when set, is given each channel's mountpoint before the
	// layout is made: it detaches a stale mount an mlfsd left there (its
	// daemon was killed), so running the job again heals it. Nil, or a
	// stale mount it leaves alone: the mountpoint is refused.
	DetachStale func(mountpoint string) error
}

// mount is one mounted channel of a run.
type mount struct {
	kind string // "input" or "output"
	ch   Channel
	m    Mounted
}

func (m mount) String() string { return fmt.Sprintf("%s channel %q (%s)", m.kind, m.ch.Name, m.ch.URI) }

// Run prepares the job, runs its command and tears everything down. An
// error with status 0 means the job did not start: nothing stays mounted
// and what Run created is removed. Otherwise status is the command's exit
// status (128+signal when a signal killed it), or ExitOutputFailed, with a
// non-nil error, when an output could not be drained or a mount detached.
func (r *Runner) Run(ctx context.Context) (status int, err error) {
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	argv, shell := r.Command, r.Shell
	if len(argv) == 0 {
		argv, shell = r.Plan.Command, r.Plan.Shell
	}
	if len(argv) == 0 {
		return 0, errors.New("no command: give one in the spec (command) or after --")
	}
	if r.Plan.Compat == CompatSageMaker && r.Plan.Host == nil {
		// Once, so resourceconfig.json and SM_* report the same host.
		h := DetectHost()
		r.Plan.Host = &h
	}
	if r.RunAs != nil {
		if err := checkRunAs(r.RunAs); err != nil {
			return 0, err
		}
	}
	vars, warnings := r.Plan.Env()
	for _, w := range warnings {
		log.Warn(w)
	}
	if shell {
		// SageMaker keeps names such as SM_HP_BATCH-SIZE; a shell cannot
		// hold them, and dash (Debian's /bin/sh) drops them from the
		// environment of what it runs, as it would under the toolkit's
		// own shell entry points.
		var odd []string
		for _, v := range vars {
			if !isShellName(v.Name) {
				odd = append(odd, v.Name)
			}
		}
		if len(odd) > 0 {
			log.Warn("some job variables are no shell names and /bin/sh may drop them before the command sees them; give the command as a list (argv) to keep them",
				"variables", strings.Join(odd, ","))
		}
	}

	// A signal while mounting or copying the code cancels that work and
	// the command never starts. The context stays alive until the end, as
	// mounts may hold on to it.
	startCtx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	sigc := make(chan os.Signal, 1)
	stopWatch, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-r.Signals:
			log.Warn("signal received before the command started; stopping", "signal", sig.String())
			sigc <- sig
			cancelStart()
		case <-stopWatch:
		}
	}()
	mounts, err := r.start(startCtx, log)
	close(stopWatch)
	<-watched
	var sig os.Signal
	select {
	case sig = <-sigc:
	case sig = <-r.Signals: // arrived as the watcher stopped
	default:
	}
	if err != nil {
		if sig != nil {
			return 0, fmt.Errorf("interrupted by %v: %w", sig, err)
		}
		return 0, err
	}
	if sig != nil {
		status = signalStatus(sig)
	} else {
		status = r.runCommand(argv, shell, vars, log)
	}
	return r.finish(ctx, mounts, status, log)
}

// signalStatus is the shell's status for a process killed by sig.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128
}

// start creates the layout, writes the config, mounts every channel and
// copies the code. On failure it undoes all of it.
func (r *Runner) start(ctx context.Context, log *slog.Logger) (mounts []mount, err error) {
	p := r.Plan
	var c created
	defer func() {
		if err == nil {
			return
		}
		var errs []error
		for i := len(mounts) - 1; i >= 0; i-- {
			if uerr := mounts[i].m.Unmount(); uerr != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", mounts[i], uerr))
			}
		}
		keep := map[string]bool{p.WorkingDir(): true}
		if uerr := c.undo(keep); uerr != nil {
			errs = append(errs, fmt.Errorf("clean up: %w", uerr))
		}
		if len(errs) > 0 {
			err = fmt.Errorf("%w (and while undoing: %w)", err, errors.Join(errs...))
		}
		mounts = nil
	}()

	dirs := []string{p.WorkingDir(), p.ConfigDir()}
	for _, ch := range p.Inputs {
		dirs = append(dirs, p.InputDir(ch))
	}
	for _, ch := range p.Outputs {
		dirs = append(dirs, p.OutputDir(ch))
	}
	if r.DetachStale != nil {
		for _, d := range dirs[2:] { // the channels' mountpoints
			if err := r.DetachStale(d); err != nil {
				return nil, fmt.Errorf("create layout: %w", err)
			}
		}
	}
	for _, d := range dirs {
		if err := c.mkdir(d); err != nil {
			return nil, fmt.Errorf("create layout: %w", err)
		}
	}
	if err := c.writeFile(p.HyperparametersFile(), []byte(p.HyperparametersJSON()), 0o644); err != nil {
		return nil, fmt.Errorf("write hyperparameters: %w", err)
	}
	if p.Compat == CompatSageMaker {
		for _, f := range []struct{ path, data string }{
			{p.ResourceConfigFile(), p.ResourceConfigJSON(p.host())},
			{p.InputDataConfigFile(), p.InputDataConfigJSON()},
		} {
			if err := c.writeFile(f.path, []byte(f.data), 0o644); err != nil {
				return nil, fmt.Errorf("write SageMaker config: %w", err)
			}
		}
	}

	for _, ch := range p.Inputs {
		mp := p.InputDir(ch)
		if err := checkEmptyDir(mp); err != nil {
			return mounts, fmt.Errorf("input channel %q (%s): %w", ch.Name, ch.URI, err)
		}
		m, err := r.Mounter.MountInput(ctx, ch, mp)
		if err != nil {
			return mounts, fmt.Errorf("input channel %q (%s): %w", ch.Name, ch.URI, err)
		}
		mounts = append(mounts, mount{"input", ch, m})
		log.Info("mounted input channel", "channel", ch.Name, "uri", ch.URI.String(), "at", mp)
	}
	for _, ch := range p.Outputs {
		if ch.Local {
			continue
		}
		mp := p.OutputDir(ch)
		if err := checkEmptyDir(mp); err != nil {
			return mounts, fmt.Errorf("output channel %q (%s): %w", ch.Name, ch.URI, err)
		}
		m, err := r.Mounter.MountOutput(ctx, ch, mp)
		if err != nil {
			return mounts, fmt.Errorf("output channel %q (%s): %w", ch.Name, ch.URI, err)
		}
		mounts = append(mounts, mount{"output", ch, m})
		log.Info("mounted output channel", "channel", ch.Name, "uri", ch.URI.String(), "at", mp)
	}

	if p.Code != nil {
		if err := r.copyCode(ctx, *p.Code); err != nil {
			return mounts, fmt.Errorf("code %s: %w", p.Code, err)
		}
		log.Info("copied code", "uri", p.Code.String(), "to", p.WorkingDir())
	}
	if r.RunAs != nil {
		if err := giveWorkingDir(p.WorkingDir(), r.RunAs); err != nil {
			return mounts, fmt.Errorf("hand the working directory to %s: %w", r.RunAs.Name, err)
		}
	}
	return mounts, nil
}

func (r *Runner) copyCode(ctx context.Context, u backends.URI) error {
	if r.Open == nil {
		return errors.New("no backend opener configured")
	}
	b, key, err := r.Open(ctx, u)
	if err != nil {
		return err
	}
	defer b.Close()
	return CopyCode(ctx, b, key, r.Plan.WorkingDir())
}

// childEnv is the caller's environment with the job's variables added.
// Variables the job sets, or deliberately leaves out (an oversized
// aggregate), are removed from the inherited part so no stale value leaks
// in; so are the Withhold variables.
func (r *Runner) childEnv(vars []Var, log *slog.Logger) []string {
	base := r.Environ
	if base == nil {
		base = os.Environ()
	}
	drop := map[string]bool{"PAI_HPS": true, "PAI_USER_ARGS": true}
	for _, v := range vars {
		drop[v.Name] = true
	}
	withhold := map[string]bool{}
	for _, name := range r.Withhold {
		withhold[name] = true
	}
	env := make([]string, 0, len(base)+len(vars))
	var withheld []string
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case withhold[name]:
			withheld = append(withheld, name)
		case drop[name]:
		case r.Plan.Compat == CompatSageMaker && strings.HasPrefix(name, "SM_"):
			// A stale SM_* (an oversized aggregate left out, or one the
			// toolkit reads, SM_HP_MP_PARAMETERS) must not leak in.
		default:
			env = append(env, kv)
		}
	}
	if len(withheld) > 0 {
		log.Info("storage credentials withheld from the job's environment", "variables", strings.Join(withheld, ","))
	}
	for _, v := range vars {
		env = append(env, v.Name+"="+v.Value)
	}
	return env
}

// expandArgv replaces an argv element that is exactly $PAI_USER_ARGS or
// ${PAI_USER_ARGS} with the hyperparameters as separate arguments: the
// lossless form of `train $PAI_USER_ARGS`.
func (r *Runner) expandArgv(argv []string) []string {
	out := make([]string, 0, len(argv))
	for _, a := range argv {
		if a == "$PAI_USER_ARGS" || a == "${PAI_USER_ARGS}" {
			out = append(out, r.Plan.UserArgv()...)
			continue
		}
		out = append(out, a)
	}
	return out
}

// runCommand runs the command in the working directory and returns its
// exit status, forwarding signals while it runs.
func (r *Runner) runCommand(argv []string, shell bool, vars []Var, log *slog.Logger) int {
	if !shell {
		argv = r.expandArgv(argv)
	}
	env := r.childEnv(vars, log)
	if r.RunAs != nil {
		env = r.RunAs.env(env)
	}
	newCmd := func(fg bool) *exec.Cmd {
		var cmd *exec.Cmd
		if shell {
			cmd = exec.Command("sh", "-c", argv[0])
		} else {
			cmd = exec.Command(argv[0], argv[1:]...)
		}
		cmd.Dir = r.Plan.WorkingDir()
		cmd.Env = env
		cmd.Stdin, cmd.Stdout, cmd.Stderr = r.Stdin, r.Stdout, r.Stderr
		cmd.SysProcAttr = processGroup(fg)
		if r.RunAs != nil {
			cmd.SysProcAttr.Credential = r.RunAs.credential()
		}
		return cmd
	}
	ttyFD, fg := foregroundTTY(r.Stdin)
	cmd := newCmd(fg)
	err := cmd.Start()
	if err != nil && fg && !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, os.ErrNotExist) {
		// The terminal would not take the job's group: run it without.
		log.Debug("cannot give the terminal to the command", "err", err)
		fg = false
		cmd = newCmd(false)
		err = cmd.Start()
	}
	if fg {
		defer func() {
			if err := reclaimTerminal(ttyFD); err != nil {
				log.Warn("cannot take the terminal back from the command", "err", err)
			}
		}()
	}
	if err != nil {
		log.Error("cannot start the command", "err", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return ExitNotFound
		}
		return ExitCannotRun
	}
	done := make(chan struct{})
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case <-done:
				return
			case sig, ok := <-r.Signals:
				if !ok {
					<-done
					return
				}
				log.Info("forwarding signal to the command", "signal", sig.String())
				_ = signalGroup(cmd.Process.Pid, sig)
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	<-forwarded
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	log.Error("waiting for the command", "err", err)
	return ExitCannotRun
}

// finish drains every output, then unmounts everything, newest first.
//
// Draining waits for uploads as long as they take. A second signal after
// the command exited aborts it (what was not uploaded stays with the output
// mount, e.g. journaled for its next start) and makes the status
// ExitOutputFailed. The first one only warns: a signal sent to a whole
// process group (kill -TERM -PGID, a terminal mlfsd had to share) reaches
// the command and mlfsd at once, and may be read here only after the
// command died of it.
func (r *Runner) finish(ctx context.Context, mounts []mount, status int, log *slog.Logger) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go func() {
		for n := 1; ; n++ {
			select {
			case sig := <-r.Signals:
				if n == 1 {
					log.Warn("outputs are still being made durable; send the signal again to abort (unfinished uploads stay pending)", "signal", sig.String())
					continue
				}
				log.Warn("signal received again: aborting the drain", "signal", sig.String())
				cancel()
				return
			case <-stopWatch:
				return
			}
		}
	}()
	var errs []error
	for _, m := range mounts {
		if m.kind != "output" {
			continue
		}
		log.Info("waiting until the output is durable", "channel", m.ch.Name, "uri", m.ch.URI.String())
		if err := m.m.Drain(ctx); err != nil {
			log.Error("OUTPUT NOT DURABLE: upload failed", "channel", m.ch.Name, "uri", m.ch.URI.String(), "err", err)
			errs = append(errs, fmt.Errorf("%s: not durable: %w", m, err))
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := mounts[i].m.Unmount(); err != nil {
			log.Error("unmount failed", "channel", mounts[i].ch.Name, "err", err)
			errs = append(errs, fmt.Errorf("unmount %s: %w", mounts[i], err))
		}
	}
	if len(errs) > 0 {
		return ExitOutputFailed, fmt.Errorf("the command exited with status %d, but: %w", status, errors.Join(errs...))
	}
	return status, nil
}
