package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/dustin/go-humanize"

	"github.com/mlfsd/mlfsd/node"
)

// printStatus prints the daemon's mounts, as a table or JSON.
func printStatus(w io.Writer, st []node.MountStatus, asJSON bool) error {
	if asJSON {
		if st == nil {
			st = []node.MountStatus{}
		}
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(st)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tKIND\tSTATE\tURI\tSERVED\tFROM STORE\tUPLOAD PENDING\tFAILED")
	for _, s := range st {
		k := "output"
		if s.ReadOnly {
			k = "input"
		}
		pending := "-"
		if !s.ReadOnly {
			pending = fmt.Sprintf("%d files, %s", s.UploadPendingFiles, humanize.IBytes(uint64(s.UploadPendingBytes)))
		}
		state := s.State
		if state == node.StateWaitingCredentials {
			// Said plainly: the mount is not served until its client
			// (a pod's republish) brings its credentials again.
			state = "waiting for its client's credentials"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", s.Target, k, state, s.URI, humanize.IBytes(uint64(s.ReadBytes)),
			humanize.IBytes(uint64(s.BackendReadBytes)), pending, s.UploadFailedFiles)
	}
	return tw.Flush()
}
