package ossemu

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// FaultKind names one kind of injected failure.
type FaultKind string

// The kinds of failure the emulator injects.
const (
	// Fault500 answers 500 InternalError before doing anything.
	Fault500 FaultKind = "500"
	// Fault503 answers 503 SlowDown (throttling) before doing anything.
	Fault503 FaultKind = "503"
	// FaultReset resets the TCP connection: in the middle of a GET's body,
	// or before a request that sends data is processed.
	FaultReset FaultKind = "reset"
	// FaultTruncate closes the connection cleanly in the middle of a GET's
	// body, short of its Content-Length (other requests: as FaultReset).
	FaultTruncate FaultKind = "truncate"
)

// AllFaultKinds returns every fault kind.
func AllFaultKinds() []FaultKind {
	return []FaultKind{Fault500, Fault503, FaultReset, FaultTruncate}
}

// ParseFaultKinds parses a comma-separated list of fault kinds; "all" (or
// "") means every kind. "truncated" is accepted for "truncate".
func ParseFaultKinds(s string) ([]FaultKind, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return AllFaultKinds(), nil
	}
	var out []FaultKind
	for _, f := range strings.Split(s, ",") {
		switch k := FaultKind(strings.TrimSpace(f)); k {
		case Fault500, Fault503, FaultReset, FaultTruncate:
			out = append(out, k)
		case "truncated":
			out = append(out, FaultTruncate)
		default:
			return nil, fmt.Errorf("unknown fault kind %q: want 500, 503, reset, truncate or all", f)
		}
	}
	return out, nil
}

// pickFault decides, with the seeded generator, whether this request fails
// and how.
func (s *Server) pickFault() FaultKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errRate <= 0 || len(s.kinds) == 0 || s.rng.Float64() >= s.errRate {
		return ""
	}
	return s.kinds[s.rng.IntN(len(s.kinds))]
}

// cutoff picks where in a body of n bytes a mid-body fault strikes.
func (s *Server) cutoff(n int64) int64 {
	if n <= 1 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.Int64N(n)
}

// connState is per-connection state, attached by ConnContext.
type connState struct {
	conn  net.Conn
	pacer *pacer // nil: unlimited bandwidth
}

type connKey struct{}

func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	cs := &connState{conn: c}
	if bw := s.opt.ConnBandwidth; bw > 0 {
		cs.pacer = &pacer{rate: bw}
	}
	return context.WithValue(ctx, connKey{}, cs)
}

func connOf(r *http.Request) *connState {
	cs, _ := r.Context().Value(connKey{}).(*connState)
	return cs
}

// killConn closes the connection: with a TCP reset (reset) or a clean FIN
// (truncate). With flush, what the handler wrote so far goes out first;
// without, the client sees no response at all (flushing an unwritten
// response would send a bare 200).
func killConn(w http.ResponseWriter, r *http.Request, kind FaultKind, flush bool) {
	if f, ok := w.(http.Flusher); ok && flush {
		f.Flush()
	}
	cs := connOf(r)
	if cs == nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := cs.conn.(*net.TCPConn); ok && kind == FaultReset {
		_ = tc.SetLinger(0)
	}
	_ = cs.conn.Close()
}

// pacer limits one connection to rate bytes per second (both directions).
type pacer struct {
	rate int64
	mu   sync.Mutex
	next time.Time
}

// wait blocks until n more bytes may pass.
func (p *pacer) wait(ctx context.Context, n int) error {
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	p.next = p.next.Add(time.Duration(float64(n) / float64(p.rate) * float64(time.Second)))
	d := p.next.Sub(now)
	p.mu.Unlock()
	if d < time.Millisecond {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pacedWriter writes through a pacer in small slices.
type pacedWriter struct {
	ctx context.Context
	w   io.Writer
	p   *pacer
}

const paceChunk = 32 << 10

func (pw *pacedWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := min(len(b), paceChunk)
		if err := pw.p.wait(pw.ctx, c); err != nil {
			return n, err
		}
		m, err := pw.w.Write(b[:c])
		n += m
		if err != nil {
			return n, err
		}
		b = b[c:]
	}
	return n, nil
}

// pacedReader reads through a pacer.
type pacedReader struct {
	ctx context.Context
	r   io.Reader
	p   *pacer
}

func (pr *pacedReader) Read(b []byte) (int, error) {
	if len(b) > paceChunk {
		b = b[:paceChunk]
	}
	n, err := pr.r.Read(b)
	if n > 0 {
		if werr := pr.p.wait(pr.ctx, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}

// bodyWriter returns the writer a response body goes through: paced when
// the connection is bandwidth-limited, the ResponseWriter itself otherwise
// (so sendfile still applies).
func bodyWriter(w http.ResponseWriter, r *http.Request) io.Writer {
	if cs := connOf(r); cs != nil && cs.pacer != nil {
		return &pacedWriter{ctx: r.Context(), w: w, p: cs.pacer}
	}
	return w
}

// requestBody returns the request body, paced when the connection is
// bandwidth-limited.
func requestBody(r *http.Request) io.Reader {
	if cs := connOf(r); cs != nil && cs.pacer != nil {
		return &pacedReader{ctx: r.Context(), r: r.Body, p: cs.pacer}
	}
	return r.Body
}
