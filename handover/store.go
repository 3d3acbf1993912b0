package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/internal/sdnotify"
	"github.com/mlfsd/mlfsd/node"
)

// The service manager's file-descriptor store carries a handover across a
// restart of the service (`systemctl restart`, a stop and a start): the
// stopping daemon freezes its mounts and stores their /dev/fuse fds and a
// sealed memfd holding the rest of the offer; the next daemon finds them
// in $LISTEN_FDS and adopts them, the way --takeover does over the
// handover socket. The memfd is stored last: the store holds a complete
// handover only when it is there.
//
// StoreStateName is the FDNAME of the memfd; each /dev/fuse fd is
// storeFusePrefix and its mount's index.
const StoreStateName = "mlfsd-handover"

const storeFusePrefix = "mlfsd-fuse-"

// stored is the memfd's content.
type stored struct {
	Protocol int                  `json:"protocol"`
	Version  string               `json:"version"`
	Mounts   []node.HandoverMount `json:"mounts"`
	// FdNames names each mount's /dev/fuse fd in the store.
	FdNames []string `json:"fd_names"`
}

// ToStore freezes n's mounts and hands them to the service manager's fd
// store (sdnotify.Available must hold). It returns nil once everything is
// stored and n has let go (uploads stopped, cache closed): the caller must
// exit at once without unmounting. On an error n's mounts were thawed and
// the store emptied of what was put there: n serves on.
func ToStore(ctx context.Context, n *node.Node, version string, log *slog.Logger) error {
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	hv, err := n.FreezeForHandover(fctx)
	cancel()
	if err != nil {
		return err
	}
	st := stored{Protocol: Protocol, Version: version, Mounts: hv.Mounts}
	var names []string
	undo := func(err error) error {
		hv.Abort()
		for _, name := range names {
			sdnotify.Notify("FDSTOREREMOVE=1\nFDNAME=" + name)
		}
		return err
	}
	for i := range hv.Mounts {
		st.FdNames = append(st.FdNames, fmt.Sprintf("%s%d", storeFusePrefix, i))
	}
	body, err := json.Marshal(st)
	if err != nil {
		return undo(err)
	}
	memfd, err := sealedMemfd(body)
	if err != nil {
		return undo(err)
	}
	defer unix.Close(memfd)
	// FDPOLL=0: the manager is not to drop a /dev/fuse fd that polls
	// readable or in error while it keeps it.
	for i, m := range hv.Mounts {
		names = append(names, st.FdNames[i])
		if err := sdnotify.Notify("FDSTORE=1\nFDPOLL=0\nFDNAME="+st.FdNames[i], m.Fd); err != nil {
			return undo(fmt.Errorf("storing the fd of %s with the service manager: %w", m.Info.Target, err))
		}
	}
	names = append(names, StoreStateName)
	if err := sdnotify.Notify("FDSTORE=1\nFDPOLL=0\nFDNAME="+StoreStateName, memfd); err != nil {
		return undo(fmt.Errorf("storing the handover state with the service manager: %w", err))
	}
	log.Info("handover: mounts frozen and kept in the service manager's fd store for the next daemon", "mounts", len(hv.Mounts))
	if err := hv.Commit(); err != nil {
		log.Error("handover: closing", "err", err)
	}
	return nil
}

// sealedMemfd is a memory file holding body that nobody can change.
func sealedMemfd(body []byte) (int, error) {
	fd, err := unix.MemfdCreate(StoreStateName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), StoreStateName)
	if _, err := f.Write(body); err != nil {
		f.Close()
		return -1, fmt.Errorf("memfd: %w", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return -1, fmt.Errorf("memfd seals: %w", err)
	}
	dup, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	return dup, err
}

// FromStore adopts the mounts a daemon left in the fd store (files, from
// sdnotify.Listen) into n and serves them. It returns false when the
// store held no handover. Whatever it held is removed from the store at
// once: a daemon that dies later leaves dead mounts, which the next one
// detaches and mounts again from the mount table, not a stale handover.
// On an error the stored mounts are lost (their fds closed) and the
// caller restores the mount table instead.
func FromStore(ctx context.Context, files []sdnotify.File, n *node.Node, version string, log *slog.Logger) (bool, error) {
	var state *os.File
	fuse := map[string]*os.File{}
	for _, f := range files {
		switch {
		case f.Name == StoreStateName:
			state = f.File
		case strings.HasPrefix(f.Name, storeFusePrefix):
			fuse[f.Name] = f.File
		default:
			continue
		}
		if err := sdnotify.Notify("FDSTOREREMOVE=1\nFDNAME=" + f.Name); err != nil {
			log.Warn("removing from the fd store", "name", f.Name, "err", err)
		}
	}
	closeAll := func() {
		for _, f := range fuse {
			f.Close()
		}
		if state != nil {
			state.Close()
		}
	}
	if state == nil {
		if len(fuse) > 0 {
			log.Warn("the fd store held /dev/fuse fds without their handover state (the old daemon died storing them); their mounts are restored from the mount table", "fds", len(fuse))
		}
		closeAll()
		return false, nil
	}
	body, err := io.ReadAll(io.NewSectionReader(state, 0, 1<<40))
	if err != nil {
		closeAll()
		return true, fmt.Errorf("reading the stored handover: %w", err)
	}
	var st stored
	if err := json.Unmarshal(body, &st); err != nil {
		closeAll()
		return true, fmt.Errorf("the stored handover: %w", err)
	}
	if st.Protocol < minProtocol || st.Protocol > Protocol {
		closeAll()
		return true, fmt.Errorf("the stored handover is in protocol %d (daemon version %q), this daemon (version %q) speaks %d to %d", st.Protocol, st.Version, version, minProtocol, Protocol)
	}
	if len(st.FdNames) != len(st.Mounts) {
		closeAll()
		return true, fmt.Errorf("the stored handover names %d fds for %d mounts", len(st.FdNames), len(st.Mounts))
	}
	for i, name := range st.FdNames {
		f := fuse[name]
		if f == nil {
			closeAll()
			return true, fmt.Errorf("the fd store lacks %s, the /dev/fuse fd of %s", name, st.Mounts[i].Info.Target)
		}
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return true, err
		}
		st.Mounts[i].Fd = fd
		delete(fuse, name)
		f.Close()
	}
	closeAll()
	ad, err := n.Adopt(ctx, st.Mounts)
	if err != nil {
		return true, errors.Join(errors.New("adopting the stored mounts"), err)
	}
	if err := ad.Serve(); err != nil {
		log.Error("taking over from the fd store: some of it failed", "err", err)
	}
	log.Info("took the mounts over from the fd store", "mounts", len(st.Mounts), "old_version", st.Version)
	return true, nil
}
