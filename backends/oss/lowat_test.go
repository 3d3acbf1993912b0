package oss

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// TestLargeReadsOnPacedConnection reads ranges of an object served in
// small paced pieces with buffers far larger than what is left of each
// range (so SO_RCVLOWAT is set past the range's end if lowatConn ever
// asked for more than the response still sends: the read would then hang).
func TestLargeReadsOnPacedConnection(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{ConnBandwidth: 50 << 20})
	b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry})
	data := make([]byte, 3<<20+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	w, err := b.Write(t.Context(), "big", backends.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	info, err := w.Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, rg := range []struct{ off, n int64 }{
		{0, -1}, {100, 2<<20 + 7}, {int64(len(data)) - 70<<10, 70 << 10}, {1 << 20, 1 << 20}, {5, 65<<10 + 1},
	} {
		for _, bufSize := range []int{4 << 20, 1 << 20, 100 << 10} {
			r, err := b.Read(t.Context(), "big", backends.ReadOptions{Offset: rg.off, Length: rg.n, IfVersion: info.Version})
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			buf := make([]byte, bufSize)
			for {
				n, err := io.ReadFull(r, buf)
				got = append(got, buf[:n]...)
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					break
				}
				if err != nil {
					t.Fatalf("range %+v, buffer %d: %v", rg, bufSize, err)
				}
			}
			r.Close()
			want := data[rg.off:]
			if rg.n >= 0 {
				want = want[:rg.n]
			}
			if !bytes.Equal(got, want) {
				t.Errorf("range %+v, buffer %d: got %d bytes, want %d (or different bytes)", rg, bufSize, len(got), len(want))
			}
		}
	}
}
