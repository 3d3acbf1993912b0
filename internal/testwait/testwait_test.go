package testwait

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilSeesConditionTurnTrue(t *testing.T) {
	var n atomic.Int32
	go func() {
		for n.Load() < 5 {
			n.Add(1)
		}
	}()
	if err := Until(Guard, func() bool { return n.Load() >= 5 }); err != nil {
		t.Fatal(err)
	}
}

func TestUntilTimesOut(t *testing.T) {
	if err := Until(10*time.Millisecond, func() bool { return false }); !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
}

func TestEventuallyNoErrorKeepsTrying(t *testing.T) {
	calls := 0
	EventuallyNoError(t, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}, "third call")
	if calls != 3 {
		t.Fatalf("calls = %d, want 3", calls)
	}
}
