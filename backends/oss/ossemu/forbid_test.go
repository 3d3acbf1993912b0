package ossemu_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// TestForbidOverwrite: a PUT with x-oss-forbid-overwrite: true succeeds
// only on a free key; on a taken one it is refused, as by OSS, with 409
// FileAlreadyExists and the object left as it was. Of 8 such PUTs racing
// on one key exactly one succeeds. Without the header a PUT overwrites.
func TestForbidOverwrite(t *testing.T) {
	e := start(t, ossemu.Options{})
	if err := e.bucket.PutObject("k", strings.NewReader("first"), alioss.ForbidOverWrite(true)); err != nil {
		t.Fatalf("forbid-overwrite PUT of a free key: %v", err)
	}
	err := e.bucket.PutObject("k", strings.NewReader("second"), alioss.ForbidOverWrite(true))
	var se alioss.ServiceError
	if !errors.As(err, &se) || se.StatusCode != http.StatusConflict || se.Code != "FileAlreadyExists" {
		t.Fatalf("forbid-overwrite PUT of a taken key: %v; want 409 FileAlreadyExists", err)
	}
	read := func(key string) string {
		t.Helper()
		r, err := e.bucket.GetObject(key)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("k"); got != "first" {
		t.Fatalf("after a refused PUT: %q", got)
	}
	if err := e.bucket.PutObject("k", strings.NewReader("third"), alioss.ForbidOverWrite(false)); err != nil || read("k") != "third" {
		t.Fatalf("plain PUT over the key: %v", err)
	}

	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = e.bucket.PutObject("dir/race", strings.NewReader(strings.Repeat("x", i+1)), alioss.ForbidOverWrite(true))
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("racers %d and %d both succeeded", winner, i)
			}
			winner = i
		} else if !errors.As(err, &se) || se.Code != "FileAlreadyExists" {
			t.Errorf("racer %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no racer succeeded")
	}
	if got := read("dir/race"); got != strings.Repeat("x", winner+1) {
		t.Fatalf("object holds %q; the winner was racer %d", got, winner)
	}
}
