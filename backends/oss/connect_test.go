package oss

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/endpointtest"
)

// TestFirstContactSilentEndpoint: New gives up after ConnectTimeout and
// names the endpoint that did not answer.
func TestFirstContactSilentEndpoint(t *testing.T) {
	setCreds(t)
	addr := endpointtest.Silent(t)
	u, err := backends.ParseURI("oss://bucket." + addr + "/x/")
	if err != nil {
		t.Fatal(err)
	}
	// The guard only keeps a regression from hanging the suite; the
	// connect timeout under test is far shorter.
	guard, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, err = New(guard, u, Options{ConnectTimeout: time.Second}, nil)
	if err == nil {
		t.Fatal("New succeeded against an endpoint that never answers")
	}
	if guard.Err() != nil {
		t.Fatalf("New returned only when the test's guard expired: %v", err)
	}
	for _, want := range []string{addr, "did not answer within 1s", "connect timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !errors.Is(err, backends.ErrTransient) {
		t.Errorf("error %v is not ErrTransient", err)
	}
}

func TestConnectTimeoutDefault(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.ConnectTimeout != DefaultConnectTimeout || DefaultConnectTimeout != 10*time.Second {
		t.Errorf("ConnectTimeout default = %v", o.ConnectTimeout)
	}
	if _, err := (Options{ConnectTimeout: -time.Second}).withDefaults(); err == nil {
		t.Error("a negative ConnectTimeout was accepted")
	}
}
