package sharedcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/hdfs"
	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/sharedcache/sharedtest"
)

func nasStore(t *testing.T) backends.Backend {
	t.Helper()
	u, err := backends.ParseURI("nas://" + t.TempDir() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nas.New(t.Context(), u, nas.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ossStore is a bucket of an OSS emulator over a real socket, opened with
// the options a node gives its tier's store (few retries: the tier falls
// back to the source rather than wait).
func ossStore(t *testing.T) backends.Backend {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "tier"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, endpoint := ossemutest.Start(t, root, ossemu.Options{})
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	u, err := backends.ParseURI("oss://tier/shared/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := oss.New(t.Context(), u, oss.Options{Endpoint: endpoint, Retry: oss.RetryOptions{MaxAttempts: 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testKey is the MAC key of the tests' tiers.
var testKey = []byte("mlfsd-sharedcache-test-key-0123456789")

// forge is the harness's Forge (sharedtest.Harness): obj with its data
// changed, re-encoded with a matching header and CRC, its MAC under testKey
// or under another key; any other object of the store as it is.
func forge(obj []byte, blockSize int64, withKey bool, change func([]byte) []byte) []byte {
	if len(obj) < len(magic)+4 || string(obj[:len(magic)]) != magic {
		return obj // a single-flight claim marker or the sweep lease
	}
	hl := int(binary.BigEndian.Uint32(obj[len(magic):]))
	var h header
	if err := json.Unmarshal(obj[len(magic)+4:len(magic)+4+hl], &h); err != nil {
		panic(err)
	}
	data := change(bytes.Clone(obj[len(magic)+4+hl:]))
	key := []byte("someone-else-s-key-not-the-clusters")
	if withKey {
		key = testKey
	}
	return append(encodeHeader(newMACKey(key), blockSize, h, data), data...)
}

// testOptions: a short deadline (the conformance suite sets its own for
// its tiers: short where the store is made to fail or hang, a hang guard
// where it is healthy), a short backoff, and a short wait for a block
// another node claimed: the corruption tests leave the first node's claims
// live over blocks they spoil, and each waits that long once before it
// reads the source.
func testOptions(bs int64) Options {
	return Options{Key: testKey, BlockSize: bs, Timeout: 300 * time.Millisecond, Backoff: 200 * time.Millisecond, QueueBytes: 64 << 20,
		FlightWait: 300 * time.Millisecond}
}

// nopClose keeps a tier from closing the store its sub-test shares with
// other tiers (the harness closes it once).
type nopClose struct{ backends.Backend }

func (nopClose) Close() error { return nil }

// Unwrap keeps the store's optional interfaces (ExclusiveWriter) in reach.
func (n nopClose) Unwrap() backends.Backend { return n.Backend }

func harness(store func(*testing.T) backends.Backend, mutate func(*Options)) sharedtest.Harness {
	return sharedtest.Harness{
		Store: func(t *testing.T) backends.Backend {
			b := store(t)
			t.Cleanup(func() { b.Close() })
			return b
		},
		New: func(t *testing.T, s backends.Backend, c sharedtest.Config) sharedtest.Tier {
			opt := testOptions(c.BlockSize)
			opt.Timeout = c.Timeout
			if mutate != nil {
				mutate(&opt)
			}
			tier, err := New(nopClose{s}, opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tier.Close() })
			return tier
		},
		Forge: forge,
	}
}

// hdfsStore is a directory of an HDFS emulator (NameNode and DataNode over
// real sockets).
func hdfsStore(t *testing.T) backends.Backend {
	t.Helper()
	s, err := hdfsemu.New(hdfsemu.Options{Root: t.TempDir(), BlockSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	u, err := backends.ParseURI("hdfs://" + s.Addr() + "/tier/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := hdfs.New(t.Context(), u, hdfs.Options{User: "root", Retries: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformanceNAS(t *testing.T) { sharedtest.Run(t, harness(nasStore, nil)) }

func TestConformanceHDFS(t *testing.T) { sharedtest.Run(t, harness(hdfsStore, nil)) }

func TestConformanceOSS(t *testing.T) { sharedtest.Run(t, harness(ossStore, nil)) }

// mutants are broken tiers, each with the sub-tests that must catch it.
var mutants = map[string]struct {
	mutate  func(*Options)
	catches []string
}{
	"no-verify": {func(o *Options) { o.noVerify = true }, []string{"CorruptFlipped", "CorruptTruncated", "CorruptSwapped"}},
	// Checks skipped only where a block is read straight into the
	// reader's buffer: the suite must read as the node cache does.
	"no-verify-direct": {func(o *Options) { o.noVerifyDirect = true }, []string{"CorruptFlipped"}},
	"no-version":       {func(o *Options) { o.noVersion = true }, []string{"NewVersionNotStale"}},
	"no-authz":         {func(o *Options) { o.noAuthz = true }, []string{"RefusedSourceGetsNothing"}},
	// Header and CRC checked, the MAC not: a block anyone wrote is served.
	"no-mac": {func(o *Options) { o.noMAC = true }, []string{"ForgedBlock"}},
	// A block shorter than the range says the object is there is served.
	"no-length-check": {func(o *Options) { o.noLengthCheck = true }, []string{"ForgedShortBlock"}},
	// A deadline the slow store outlasts: the suite's own timeout (far
	// above this test's child deadline) is what catches it.
	"no-deadline": {func(o *Options) { o.Timeout = time.Hour }, []string{"StoreSlow"}},
}

const mutantEnv = "MLFSD_SHAREDCACHE_MUTANT"

// TestMutantChild runs the suite on the mutant named in the environment;
// it is the child half of TestSuiteCatchesMutants.
func TestMutantChild(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("child process of TestSuiteCatchesMutants")
	}
	sharedtest.Run(t, harness(nasStore, mutants[name].mutate))
}

// TestSuiteCatchesMutants proves the suite fails on broken tiers: one that
// serves blocks without checking them, one that checks all but their MAC,
// one that serves a block shorter than the object holds there, one that skips the checksum of the
// blocks it reads straight into the caller's buffer, one that keys blocks
// without the version, one that serves blocks to credentials the source
// refuses, one with no deadline on the store.
func TestSuiteCatchesMutants(t *testing.T) {
	names := make([]string, 0, len(mutants))
	for n := range mutants {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, sub := range mutants[name].catches {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				args := []string{"-test.run", "^TestMutantChild$/^" + sub + "$", "-test.v"}
				if name == "no-deadline" {
					args = append(args, "-test.timeout", "20s")
				}
				cmd := exec.CommandContext(ctx, os.Args[0], args...)
				cmd.Env = append(os.Environ(), mutantEnv+"="+name)
				out, err := cmd.CombinedOutput()
				cancel()
				if err == nil {
					t.Errorf("sub-test %s passed on mutant %s:\n%s", sub, name, out)
					continue
				}
				if !strings.Contains(string(out), "TestMutantChild/"+sub) ||
					!(strings.Contains(string(out), "--- FAIL: TestMutantChild/"+sub) || strings.Contains(string(out), "panic: test timed out")) {
					t.Errorf("mutant %s: sub-test %s did not report a failure:\n%s", name, sub, out)
				}
			}
		})
	}
}
