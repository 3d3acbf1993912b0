package ossemu_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// listSynthetic lists every key and common prefix under prefix, 1,000 a page.
func listSynthetic(t *testing.T, b *alioss.Bucket, prefix, delim string) (keys, prefixes []string) {
	t.Helper()
	marker := ""
	for {
		r, err := b.ListObjects(alioss.Prefix(prefix), alioss.Delimiter(delim), alioss.Marker(marker), alioss.MaxKeys(1000))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range r.Objects {
			keys = append(keys, o.Key)
		}
		prefixes = append(prefixes, r.CommonPrefixes...)
		if !r.IsTruncated {
			return keys, prefixes
		}
		marker = r.NextMarker
	}
}

// TestSyntheticNamespace: a generated namespace lists, flat and fanned out
// into directories, exactly the keys SyntheticKey names, in order, paged
// and folded at '/'; its objects read as SyntheticData says, whole and in
// ranges; a key it does not hold is missing; and it cannot be changed.
func TestSyntheticNamespace(t *testing.T) {
	t.Run("flat", func(t *testing.T) {
		syn := ossemu.Synthetic{Bucket: bucketName, N: 2500, Size: 3000}
		e := start(t, ossemu.Options{Synthetic: &syn})
		keys, prefixes := listSynthetic(t, e.bucket, "", "/")
		if len(keys) != 2500 || len(prefixes) != 0 {
			t.Fatalf("%d keys and %d prefixes, want 2500 and none", len(keys), len(prefixes))
		}
		for i, k := range keys {
			if want := ossemu.SyntheticKey(syn, int64(i)); k != want {
				t.Fatalf("key %d is %q, want %q", i, k, want)
			}
		}
		if keys[0] != "f0000" || keys[2499] != "f2499" {
			t.Fatalf("keys from %q to %q, want f0000 to f2499", keys[0], keys[2499])
		}
		// The lookup of one name: the names starting with it.
		r, err := e.bucket.ListObjects(alioss.Prefix("f1234"), alioss.Delimiter("/"), alioss.MaxKeys(2))
		if err != nil || len(r.Objects) != 1 || r.Objects[0].Key != "f1234" || r.Objects[0].Size != 3000 || r.IsTruncated {
			t.Fatalf("listing of prefix f1234: %+v, %v", r, err)
		}
		r, err = e.bucket.ListObjects(alioss.Prefix("f9"), alioss.MaxKeys(2))
		if err != nil || len(r.Objects) != 0 {
			t.Fatalf("listing of a prefix past the namespace: %+v, %v", r, err)
		}
		for _, k := range []int64{0, 1234, 2499} {
			body, err := e.bucket.GetObject(ossemu.SyntheticKey(syn, k))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(body)
			body.Close()
			want := make([]byte, syn.Size)
			ossemu.SyntheticData(k, want, 0)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("object %d: %d bytes, %v; want its %d synthetic bytes", k, len(got), err, len(want))
			}
			body, err = e.bucket.GetObject(ossemu.SyntheticKey(syn, k), alioss.Range(1000, 1999))
			if err != nil {
				t.Fatal(err)
			}
			got, err = io.ReadAll(body)
			body.Close()
			if err != nil || !bytes.Equal(got, want[1000:2000]) {
				t.Fatalf("object %d, bytes 1000-1999: %d bytes, %v", k, len(got), err)
			}
		}
		if bytes.Equal(objectBytes(t, e, "f0000"), objectBytes(t, e, "f0001")) {
			t.Fatal("two objects have the same content")
		}
		for _, k := range []string{"f2500", "f12", "x", "f00001", "d0/f0000"} {
			if _, err := e.bucket.GetObjectMeta(k); err == nil {
				t.Errorf("HEAD %s succeeded; the namespace does not hold it", k)
			}
		}
		err = e.bucket.PutObject("f0001", strings.NewReader("x"))
		if se, ok := err.(alioss.ServiceError); !ok || se.Code != "AccessDenied" {
			t.Fatalf("PUT into the synthetic bucket: %v, want AccessDenied", err)
		}
		if err := e.bucket.DeleteObject("f0001"); err == nil {
			t.Fatal("DELETE in the synthetic bucket succeeded")
		}
	})
	t.Run("fanout", func(t *testing.T) {
		syn := ossemu.Synthetic{Bucket: bucketName, N: 2500, FanOut: 1000, Size: 10}
		e := start(t, ossemu.Options{Synthetic: &syn})
		keys, prefixes := listSynthetic(t, e.bucket, "", "/")
		if len(keys) != 0 || strings.Join(prefixes, ",") != "d0/,d1/,d2/" {
			t.Fatalf("top: keys %q, prefixes %q; want the prefixes d0/ d1/ d2/", keys, prefixes)
		}
		keys, _ = listSynthetic(t, e.bucket, "d1/", "/")
		if len(keys) != 1000 || keys[0] != "d1/f1000" || keys[999] != "d1/f1999" {
			t.Fatalf("d1/: %d keys, want d1/f1000 to d1/f1999", len(keys))
		}
		keys, _ = listSynthetic(t, e.bucket, "", "")
		if len(keys) != 2500 || keys[2499] != "d2/f2499" {
			t.Fatalf("recursive: %d keys, want 2500 ending at d2/f2499", len(keys))
		}
		// Pages of prefixes continue after the last prefix listed.
		r, err := e.bucket.ListObjects(alioss.Delimiter("/"), alioss.MaxKeys(2))
		if err != nil || strings.Join(r.CommonPrefixes, ",") != "d0/,d1/" || !r.IsTruncated {
			t.Fatalf("first page of 2: %+v, %v", r, err)
		}
		r, err = e.bucket.ListObjects(alioss.Delimiter("/"), alioss.MaxKeys(2), alioss.Marker(r.NextMarker))
		if err != nil || strings.Join(r.CommonPrefixes, ",") != "d2/" || r.IsTruncated {
			t.Fatalf("second page of 2: %+v, %v", r, err)
		}
		if got := objectBytes(t, e, "d2/f2000"); len(got) != 10 {
			t.Fatalf("d2/f2000: %d bytes, want 10", len(got))
		}
		if _, err := e.bucket.GetObjectMeta("d1/f2000"); err == nil {
			t.Fatal("HEAD of an object under another directory's name succeeded")
		}
	})
}

func objectBytes(t *testing.T, e *emu, key string) []byte {
	t.Helper()
	body, err := e.bucket.GetObject(key)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSyntheticOptions: a namespace that cannot be made is refused with
// what is wrong.
func TestSyntheticOptions(t *testing.T) {
	for _, tc := range []struct {
		syn  ossemu.Synthetic
		want string
	}{
		{ossemu.Synthetic{N: 0}, "at least 1"},
		{ossemu.Synthetic{N: 10, FanOut: -1}, "fan-out"},
		{ossemu.Synthetic{N: 10, Size: -1}, "size"},
		{ossemu.Synthetic{N: 10, Bucket: ".x"}, "bucket"},
	} {
		_, err := ossemu.New(t.TempDir(), ossemu.Options{Synthetic: &tc.syn})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", tc.syn, err, tc.want)
		}
	}
}
