package ossemu

import (
	"hash/crc64"
	"math/rand/v2"
	"testing"
)

// TestCRC64Combine: the combined CRC of two pieces is the CRC of the whole,
// for empty pieces, single bytes, odd lengths and part-sized ones.
func TestCRC64Combine(t *testing.T) {
	tab := crc64.MakeTable(crc64.ECMA)
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3<<20+7)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, c := range [][2]int{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {7, 13}, {100 << 10, 1}, {1 << 20, 2<<20 + 7}, {3<<20 + 7, 0}} {
		a, b := data[:c[0]], data[c[0]:c[0]+c[1]]
		whole := crc64.Checksum(data[:c[0]+c[1]], tab)
		if got := crc64Combine(crc64.Checksum(a, tab), crc64.Checksum(b, tab), int64(len(b))); got != whole {
			t.Errorf("combine of %d and %d bytes = %x, want %x", len(a), len(b), got, whole)
		}
	}
}
