package bench

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// PrimeMemory touches size bytes of fresh anonymous memory and frees it
// again, so that a timed phase started right after finds that much free
// memory backed by the host.
//
// Virtual machines with free page reporting (virtio-balloon, as on the
// development and CI machines here) hand memory that stays free for about
// two seconds back to the host; the first touch of such a page afterwards
// costs about ten times a normal one (measured here: a 2 GiB write into the
// page cache took 0.4 s or 4.5 s depending only on how long ago its memory
// was freed). That cost falls on whichever side of a comparison allocates
// more memory (page cache, a daemon's buffers), not on the code measured,
// so benchmarks prime before each timed phase, on every side alike. On
// bare metal it only costs the time of the touch.
func PrimeMemory(size int64) error {
	if size <= 0 {
		return nil
	}
	m, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("priming %d bytes of memory: %w", size, err)
	}
	for i := 0; i < len(m); i += os.Getpagesize() {
		m[i] = 1
	}
	return unix.Munmap(m)
}
