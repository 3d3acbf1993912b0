// Command memhog takes a fraction of the machine's memory and holds it
// until it is signalled: the memory pressure of `make test-stress`. It
// allocates the fraction of MemTotal (/proc/meminfo), writes every page
// so that the kernel backs it, writes its ready file, and touches every
// page again now and then so that the memory stays in use (not a cold
// allocation the kernel could reclaim to swap first).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// chunk is the unit of allocation: small enough that the hog grows
// steadily, large enough that it needs few slices.
const chunk = 64 << 20

func main() {
	fraction := flag.Float64("fraction", 0.5, "fraction of MemTotal to hold, in (0, 0.9]")
	ready := flag.String("ready", "", "file to write once the memory is held")
	every := flag.Duration("touch-every", 10*time.Second, "how often every page is written again")
	flag.Parse()
	if err := run(*fraction, *ready, *every); err != nil {
		fmt.Fprintln(os.Stderr, "memhog:", err)
		os.Exit(1)
	}
}

func run(fraction float64, ready string, every time.Duration) error {
	if fraction <= 0 || fraction > 0.9 {
		return fmt.Errorf("-fraction %v: want a value in (0, 0.9]", fraction)
	}
	total, err := memTotal()
	if err != nil {
		return err
	}
	want := int64(float64(total) * fraction)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	var held [][]byte
	for have := int64(0); have < want; {
		n := min(int64(chunk), want-have)
		b := make([]byte, n)
		touch(b)
		held = append(held, b)
		have += n
	}
	fmt.Fprintf(os.Stderr, "memhog: holding %d MiB of %d MiB (pid %d)\n", want>>20, total>>20, os.Getpid())
	if ready != "" {
		if err := os.WriteFile(ready, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return err
		}
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-tick.C:
			for _, b := range held {
				touch(b)
			}
		}
	}
}

// touch writes one byte of every page of b.
func touch(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i]++
	}
}

// memTotal is MemTotal of /proc/meminfo, in bytes.
func memTotal() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: MemTotal %q: %w", fields[1], err)
			}
			return kb << 10, nil
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("/proc/meminfo has no MemTotal line")
}
