package oss

import (
	"errors"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// TestStoreCodeOfOSSErrors: OSS's own error code reaches
// backends.StoreCode (metrics count failures by it) under the backend's
// wrapping, while the sentinel still decides.
func TestStoreCodeOfOSSErrors(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry})
	_, err := b.Read(t.Context(), "missing", backends.ReadOptions{Length: -1})
	if !errors.Is(err, backends.ErrNotExist) || backends.StoreCode(err) != "NoSuchKey" {
		t.Errorf("read of a missing key: %v, code %q; want ErrNotExist and NoSuchKey", err, backends.StoreCode(err))
	}
	t.Setenv("OSS_ACCESS_KEY_SECRET", "wrong")
	u, _ := backends.ParseURI("oss://" + testBucket + "/data/")
	b2, err := New(t.Context(), u, Options{Endpoint: e.endpoint, Retry: fastRetry}, nil)
	if err == nil { // refused at the first request rather than at New
		defer b2.Close()
		_, err = b2.Read(t.Context(), "missing", backends.ReadOptions{Length: -1})
	}
	if !errors.Is(err, backends.ErrPermission) || backends.StoreCode(err) != "SignatureDoesNotMatch" {
		t.Errorf("read with a wrong secret: %v, code %q; want ErrPermission and SignatureDoesNotMatch", err, backends.StoreCode(err))
	}
}
