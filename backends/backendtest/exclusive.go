package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// exclusiveRacers is how many callers race on one key.
const exclusiveRacers = 8

// testExclusiveWriter: of 8 goroutines racing WriteExclusive on one key
// (released together, over several rounds and keys, one in a directory
// that does not exist yet), exactly one wins; every other gets ErrExist;
// the object holds the winner's bytes at the version it reported; a late
// caller loses too; after Delete the key can be won again.
func testExclusiveWriter(t *testing.T, s *suite) {
	b := s.open(t)
	if !s.opt.ExclusiveWriter {
		t.Skip("Options.ExclusiveWriter not set")
	}
	ew := requireOptional[backends.ExclusiveWriter](t, b, true, "ExclusiveWriter")
	ctx := t.Context()
	for round, key := range []string{"lease", "fresh/dir/marker", "lease2", "x y+%z", "fresh/dir/marker2"} {
		type result struct {
			info backends.ObjectInfo
			err  error
		}
		results := make([]result, exclusiveRacers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range exclusiveRacers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				info, err := ew.WriteExclusive(ctx, key, racerData(round, i))
				results[i] = result{info, err}
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, r := range results {
			switch {
			case r.err == nil && winner >= 0:
				t.Fatalf("round %d, key %q: racers %d and %d both won WriteExclusive", round, key, winner, i)
			case r.err == nil:
				winner = i
			case !errors.Is(r.err, backends.ErrExist):
				t.Errorf("round %d, key %q: losing racer %d: error %q does not wrap ErrExist", round, key, i, r.err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d, key %q: no racer of %d won WriteExclusive", round, key, exclusiveRacers)
		}
		want := racerData(round, winner)
		checkCommitInfo(t, key, results[winner].info, int64(len(want)))
		wantContent(t, b, key, want)
		if st := stat(t, b, key); st.Version != results[winner].info.Version || st.Size != int64(len(want)) {
			t.Errorf("key %q: Stat = %+v; the winner reported version %q, size %d", key, st, results[winner].info.Version, len(want))
		}
		_, err := ew.WriteExclusive(ctx, key, []byte("late"))
		wantErr(t, fmt.Sprintf("a late WriteExclusive(%q)", key), err, backends.ErrExist)
		wantContent(t, b, key, want)
	}
	// A deleted key can be won again; an empty object can be written.
	if err := b.Delete(ctx, "lease"); err != nil {
		t.Fatalf("Delete(lease): %v", err)
	}
	info, err := ew.WriteExclusive(ctx, "lease", []byte("again"))
	if err != nil {
		t.Fatalf("WriteExclusive after Delete: %v", err)
	}
	checkCommitInfo(t, "lease", info, 5)
	wantContent(t, b, "lease", []byte("again"))
	info, err = ew.WriteExclusive(ctx, "empty", nil)
	if err != nil {
		t.Fatalf("WriteExclusive of an empty object: %v", err)
	}
	checkCommitInfo(t, "empty", info, 0)
	if got := get(t, b, "empty"); len(got) != 0 {
		t.Errorf("empty object reads %s", short(got))
	}
}

// racerData is what racer i writes in a round: distinct per racer, and
// of different lengths, so the content names the winner.
func racerData(round, i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("round %d racer %d;", round, i)), 1+i)
}
