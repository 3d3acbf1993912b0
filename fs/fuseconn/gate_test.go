package fuseconn

import (
	"context"
	"reflect"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

// notRequests are the methods of fuse.RawFileSystem that are not kernel
// requests: go-fuse calls them itself, before serving (Init, SetDebug),
// once the connection is gone (OnUnmount), or to print (String).
var notRequests = map[string]bool{"Init": true, "String": true, "SetDebug": true, "OnUnmount": true}

// TestEveryRequestIsGated: every request method of go-fuse's
// fuse.RawFileSystem, read from the interface by reflection, waits at a
// frozen gate and goes on once thawed. A method a new go-fuse adds that
// rawFS does not write out would reach the bridge through the embedded
// interface without waiting, and fail here: a handover could then answer
// it from the old daemon after the snapshot was taken.
func TestEveryRequestIsGated(t *testing.T) {
	typ := reflect.TypeOf((*fuse.RawFileSystem)(nil)).Elem()
	if typ.NumMethod() < 40 {
		t.Fatalf("fuse.RawFileSystem has %d methods; this test reads them all", typ.NumMethod())
	}
	for i := 0; i < typ.NumMethod(); i++ {
		m := typ.Method(i)
		if notRequests[m.Name] {
			continue
		}
		t.Run(m.Name, func(t *testing.T) {
			h := newRawFS(fuse.NewDefaultRawFileSystem(), nil)
			if err := h.freeze(context.Background()); err != nil {
				t.Fatal(err)
			}
			args := make([]reflect.Value, m.Type.NumIn())
			for j := range args {
				args[j] = zeroArg(m.Type.In(j))
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				reflect.ValueOf(h).MethodByName(m.Name).Call(args)
			}()
			returned := false
			testwait.Eventually(t, func() bool {
				select {
				case <-done:
					returned = true
					return true
				default:
					return h.waitingAtGate() == 1
				}
			}, "%s neither waited at the gate nor returned", m.Name)
			if returned {
				t.Fatalf("%s was answered while the mount was frozen: rawFS does not gate it", m.Name)
			}
			h.thaw()
			<-done
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.inflight != 0 || h.waiting != 0 {
				t.Fatalf("after %s: %d requests in flight, %d waiting", m.Name, h.inflight, h.waiting)
			}
		})
	}
}

// zeroArg is an argument of type typ for a request that only has to pass
// the gate: a new value behind a pointer, else the zero value.
func zeroArg(typ reflect.Type) reflect.Value {
	if typ.Kind() == reflect.Pointer {
		return reflect.New(typ.Elem())
	}
	return reflect.Zero(typ)
}
