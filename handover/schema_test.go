package handover

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/internal/goldenjson"
)

// fixture is the golden payload of handover protocol p: an offer as a
// daemon of that protocol sends it, every field set. It is frozen once
// the protocol is released; the next protocol gets its own.
func fixture(p int) string { return filepath.Join("testdata", fmt.Sprintf("protocol-%d.json", p)) }

// TestPayloadGolden: each protocol's offer, decoded by today's types and
// encoded again, keeps every field under its name. The current
// protocol's comes back exactly: a field renamed, dropped or added
// without a new protocol (and fixture) fails; an older protocol's loses
// nothing (today's types may add fields it lacks).
func TestPayloadGolden(t *testing.T) {
	for p := minProtocol; p <= Protocol; p++ {
		t.Run(fmt.Sprint(p), func(t *testing.T) {
			raw, err := os.ReadFile(fixture(p))
			if err != nil {
				t.Fatalf("no golden payload for handover protocol %d: %v", p, err)
			}
			var m message
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			if m.Type != "offer" || m.Protocol != p || len(m.Mounts) == 0 {
				t.Fatalf("%s: not an offer of protocol %d with mounts: %s %d, %d mounts", fixture(p), p, m.Type, m.Protocol, len(m.Mounts))
			}
			got, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			diffs, err := goldenjson.Diff(raw, got, p == Protocol)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Errorf("%s: %s", fixture(p), d)
			}
		})
	}
	if _, err := os.Stat(fixture(Protocol + 1)); err == nil {
		t.Errorf("%s exists but Protocol is %d", fixture(Protocol+1), Protocol)
	}
}

// TestProtocolRefusal: a refusal is recognised as one of the protocol by
// its fields, or in the words of a protocol 1 daemon, which has none; the
// protocol to ask next is the highest both speak.
func TestProtocolRefusal(t *testing.T) {
	for _, c := range []struct {
		name      string
		asked     int
		r         message
		isProto   bool
		askedNext int
	}{
		{"older by value", 2, message{Protocol: 1, MinProtocol: 1, Error: "any words"}, true, 1},
		{"newer only", 2, message{Protocol: 4, MinProtocol: 3, Error: "any words"}, true, 0},
		{"already the highest", 1, message{Protocol: 1, MinProtocol: 1}, true, 0},
		{"protocol 1 in words", 2, message{Error: `the new daemon (version "n") speaks handover protocol 2, this one (version "o") 1`}, true, 1},
		{"words, asked 1", 1, message{Error: `the new daemon (version "n") speaks handover protocol 1, this one (version "o") 1`}, true, 0},
		{"another refusal", 2, message{Protocol: 2, Error: "/mnt/x is being mounted; try again"}, false, 0},
		{"words of another refusal", 2, message{Error: "no mounts today"}, false, 0},
	} {
		isProto, next := protocolRefusal(c.asked, c.r)
		if isProto != c.isProto || next != c.askedNext {
			t.Errorf("%s: protocolRefusal = %v, %d; want %v, %d", c.name, isProto, next, c.isProto, c.askedNext)
		}
	}
}

// TestTakeAsksTheOlderProtocolByValue: an older daemon that names its
// protocols in its refusal is asked again in its highest, whatever its
// words; one that speaks only newer protocols is not asked again.
func TestTakeAsksTheOlderProtocolByValue(t *testing.T) {
	for _, c := range []struct {
		name      string
		refusal   message
		wantAsked []int
	}{
		{"older", message{Type: "refuse", Protocol: Protocol - 1, MinProtocol: 1, Error: "not a protocol I know"}, []int{Protocol, Protocol - 1}},
		{"newer", message{Type: "refuse", Protocol: Protocol + 2, MinProtocol: Protocol + 1, Error: "too old for me"}, []int{Protocol}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sock := t.TempDir() + "/takeover.sock"
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			asked := make(chan int, 4)
			go func() {
				for {
					c2, err := l.AcceptUnix()
					if err != nil {
						return
					}
					hello, _, err := recv(c2)
					if err == nil {
						asked <- hello.Protocol
						r := c.refusal
						if hello.Protocol != Protocol {
							r = message{Type: "refuse", Protocol: Protocol - 1, Error: "no mounts today"}
						}
						send(c2, r, nil)
					}
					c2.Close()
				}
			}()
			err = Take(context.Background(), sock, newNode(t), "new", 0, slog.New(slog.DiscardHandler), nil)
			if err == nil {
				t.Fatal("Take succeeded against a refusing daemon")
			}
			l.Close()
			var got []int
			for len(asked) > 0 {
				got = append(got, <-asked)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.wantAsked) {
				t.Fatalf("asked for protocols %v, want %v (err %v)", got, c.wantAsked, err)
			}
			want := c.refusal.Error
			if len(c.wantAsked) > 1 {
				want = "no mounts today"
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("Take = %v; want the refusal %q", err, want)
			}
		})
	}
}
