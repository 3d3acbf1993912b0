// Package hdfsemu serves a local directory over the HDFS wire protocols, so
// the real github.com/colinmarc/hdfs/v2 client (and therefore the mlfsd HDFS
// backend) can be tested, demonstrated and benchmarked without a cluster.
//
// It runs one NameNode (ClientNamenodeProtocol over Hadoop RPC v9, SIMPLE
// authentication, or Kerberos through SASL/GSSAPI with Options.Kerberos) and one DataNode (DataTransferProtocol v28: READ_BLOCK and
// WRITE_BLOCK with packets, CRC32C chunk checksums and pipeline acks, and
// BLOCK_CHECKSUM as Hadoop computes it, so a client's file checksum is
// Hadoop's MD5-of-MD5-of-CRC32C, or a composite CRC when asked).
//
// The directory tree under Options.Root is the namespace: every regular file
// is an HDFS file and every directory an HDFS directory, so data can be seeded
// and checked with ordinary file tools. Blocks are byte ranges of the files:
// block i of a file covers [i*BlockSize, (i+1)*BlockSize). Block ids are
// allocated on demand and kept in memory, keyed by (inode, block start);
// file ids are inode numbers.
//
// Files under construction behave as in HDFS: create makes the file visible
// at once (empty), written blocks land in it as they arrive, and complete
// closes it. A writer that wants all-or-nothing visibility (the mlfsd backend
// does) writes to a temporary name and renames on success.
//
// Fault injection (Faults) covers what a client must survive: time to first
// byte, per-connection bandwidth, DataNode errors, DataNode connections
// dropped in the middle of a block, retriable NameNode errors and NameNode
// connections closed instead of an answer.
//
// Not emulated: SASL integrity and privacy (hadoop.rpc.protection other
// than authentication), delegation tokens, proxy users, block tokens, replication, snapshots, xattrs,
// ACLs, encryption zones and erasure coding (the NameNode answers those
// methods with RpcNoSuchMethodException).
package hdfsemu

//go:generate sh internal/proto/gen.sh

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sync"
	"time"

	"github.com/mlfsd/mlfsd/backends/dirindex"
)

// DefaultBlockSize is HDFS's default block size (dfs.blocksize).
const DefaultBlockSize = 128 << 20

// DefaultListingLimit is HDFS's default page size for getListing (dfs.ls.limit).
const DefaultListingLimit = 1000

// Options configures a Server.
type Options struct {
	// Root is the directory served as the namespace root "/". Required.
	Root string
	// Listen is the NameNode's address ("127.0.0.1:0" when empty).
	Listen string
	// DataNodeListen is the DataNode's address ("127.0.0.1:0" when empty).
	DataNodeListen string
	// BlockSize is the block size reported to clients and used to cut
	// files into blocks (DefaultBlockSize when 0). Tests use small values to
	// exercise multi-block files.
	BlockSize int64
	// ListingLimit is the getListing page size (DefaultListingLimit when 0).
	ListingLimit int
	// Superuser is the HDFS superuser, exempt from permission checks (the
	// user running the emulator when empty). Other users are checked against
	// the mode bits of the tree, as HDFS does.
	Superuser string
	// SafeMode starts the NameNode in safe mode: every namespace change
	// fails with SafeModeException until SetSafeMode(false).
	SafeMode bool
	// Kerberos, when set, secures the NameNode: clients must authenticate
	// with Kerberos (SASL/GSSAPI) and SIMPLE clients are refused.
	Kerberos *Kerberos
	// Faults injects latency, throttling and errors.
	Faults Faults
	// Log receives one line per served connection error; nil discards.
	Log *slog.Logger
}

// Faults are the injection options. The zero value injects nothing.
type Faults struct {
	// TTFB delays the DataNode's first response byte of every block read and
	// write, and every NameNode response.
	TTFB time.Duration
	// Bandwidth caps each DataNode connection at this many bytes per second
	// (0 = unlimited), in both directions.
	Bandwidth int64
	// ErrorRate is the probability that a DataNode block operation is
	// refused with an ERROR status.
	ErrorRate float64
	// DropRate is the probability that a DataNode drops a block read or
	// write connection in the middle of the block.
	DropRate float64
	// RPCErrorRate is the probability that a NameNode call fails with
	// org.apache.hadoop.ipc.RetriableException.
	RPCErrorRate float64
	// RPCDropRate is the probability that the NameNode closes the
	// connection instead of answering a call (after carrying it out, as
	// when an answer is lost on the way back).
	RPCDropRate float64
	// Seed seeds the fault choices (0 = time-based).
	Seed int64
}

// Validate reports the first invalid option.
func (f Faults) Validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"error rate", f.ErrorRate}, {"drop rate", f.DropRate}, {"RPC error rate", f.RPCErrorRate}, {"RPC drop rate", f.RPCDropRate}} {
		if r.v < 0 || r.v > 1 {
			return fmt.Errorf("%s %v: want a probability between 0 and 1", r.name, r.v)
		}
	}
	if f.TTFB < 0 {
		return fmt.Errorf("ttfb %v: must not be negative", f.TTFB)
	}
	if f.Bandwidth < 0 {
		return fmt.Errorf("bandwidth %d: must not be negative", f.Bandwidth)
	}
	return nil
}

// Server is a running NameNode and DataNode pair.
type Server struct {
	opt  Options
	root string
	log  *slog.Logger

	nnLn, dnLn net.Listener
	wg         sync.WaitGroup
	closeOnce  sync.Once
	done       chan struct{}

	// connMu guards conns, the open connections closed by Close.
	connMu sync.Mutex
	conns  map[net.Conn]struct{}

	// randMu guards rnd.
	randMu sync.Mutex
	rnd    *rand.Rand

	// mu is the namespace lock (HDFS's FSNamesystem lock): it serialises
	// namespace changes and guards everything below. Block data moves
	// outside it.
	mu       sync.Mutex
	safeMode bool
	// safeModeRefusals counts the changes refused in safe mode.
	safeModeRefusals int64
	blocks           map[uint64]*blockRef // by block id
	blockKeys        map[blockKey]uint64  // (inode, start) -> block id, for stable ids
	nextBlock        uint64
	uc               map[string]*ucFile // files under construction, by HDFS path
	owners           map[string]string  // owners set by setOwner or create, by HDFS path
	names            map[uint64]string  // uid<<1 or gid<<1|1 -> name cache

	// dirs indexes wide directories for paged getListing. Its own lock
	// is a leaf: taken under mu, never the other way round.
	dirs *dirindex.Cache
}

// changed drops the listing indexes a namespace change at host path hp
// makes stale: its directory's and its ancestors'.
func (s *Server) changed(hp string) { s.dirs.Invalidate(s.root, filepath.Dir(hp)) }

// New starts a NameNode and a DataNode serving opt.Root.
func New(opt Options) (*Server, error) {
	if opt.Root == "" {
		return nil, errors.New("hdfsemu: Root is required")
	}
	root, err := filepath.Abs(opt.Root)
	if err != nil {
		return nil, fmt.Errorf("hdfsemu: root %q: %w", opt.Root, err)
	}
	if st, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("hdfsemu: root: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("hdfsemu: root %s is not a directory", root)
	}
	if err := opt.Faults.Validate(); err != nil {
		return nil, fmt.Errorf("hdfsemu: %w", err)
	}
	if opt.BlockSize < 0 || opt.BlockSize > 1<<40 {
		return nil, fmt.Errorf("hdfsemu: block size %d out of range", opt.BlockSize)
	}
	if opt.BlockSize == 0 {
		opt.BlockSize = DefaultBlockSize
	}
	if opt.BlockSize%512 != 0 {
		return nil, fmt.Errorf("hdfsemu: block size %d is not a multiple of the 512-byte checksum chunk", opt.BlockSize)
	}
	if opt.ListingLimit <= 0 {
		opt.ListingLimit = DefaultListingLimit
	}
	if opt.Superuser == "" {
		if u, err := user.Current(); err == nil {
			opt.Superuser = u.Username
		} else {
			opt.Superuser = "root"
		}
	}
	if opt.Listen == "" {
		opt.Listen = "127.0.0.1:0"
	}
	if opt.DataNodeListen == "" {
		opt.DataNodeListen = "127.0.0.1:0"
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	seed := opt.Faults.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	s := &Server{
		opt:       opt,
		root:      root,
		log:       log,
		done:      make(chan struct{}),
		conns:     map[net.Conn]struct{}{},
		rnd:       rand.New(rand.NewSource(seed)),
		safeMode:  opt.SafeMode,
		blocks:    map[uint64]*blockRef{},
		blockKeys: map[blockKey]uint64{},
		nextBlock: 1 << 30, // HDFS block ids start high too; any value works
		uc:        map[string]*ucFile{},
		owners:    map[string]string{},
		dirs:      dirindex.New(nil),
		names:     map[uint64]string{},
	}
	s.nnLn, err = net.Listen("tcp", opt.Listen)
	if err != nil {
		return nil, fmt.Errorf("hdfsemu: namenode listen: %w", err)
	}
	s.dnLn, err = net.Listen("tcp", opt.DataNodeListen)
	if err != nil {
		s.nnLn.Close()
		return nil, fmt.Errorf("hdfsemu: datanode listen: %w", err)
	}
	s.wg.Add(2)
	go s.serve(s.nnLn, s.serveNameNode)
	go s.serve(s.dnLn, s.serveDataNode)
	return s, nil
}

// Addr is the NameNode's address (host:port), what hdfs:// URIs name.
func (s *Server) Addr() string { return s.nnLn.Addr().String() }

// DataNodeAddr is the DataNode's address.
func (s *Server) DataNodeAddr() string { return s.dnLn.Addr().String() }

// BlockSize is the block size in use.
func (s *Server) BlockSize() int64 { return s.opt.BlockSize }

// SetSafeMode enters or leaves safe mode.
func (s *Server) SetSafeMode(on bool) {
	s.mu.Lock()
	s.safeMode = on
	s.mu.Unlock()
}

// SafeModeRefusals is how many namespace changes safe mode refused so
// far: a test waits on it to end safe mode while a client retries.
func (s *Server) SafeModeRefusals() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.safeModeRefusals
}

// Close stops both servers and closes every open connection.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.nnLn.Close()
		s.dnLn.Close()
		s.connMu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.connMu.Unlock()
	})
	s.wg.Wait()
	return nil
}

func (s *Server) serve(ln net.Listener, handle func(net.Conn)) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Warn("hdfsemu: accept", "err", err)
			return
		}
		s.connMu.Lock()
		select {
		case <-s.done:
			s.connMu.Unlock()
			c.Close()
			return
		default:
		}
		s.conns[c] = struct{}{}
		s.connMu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.connMu.Lock()
				delete(s.conns, c)
				s.connMu.Unlock()
				c.Close()
			}()
			handle(c)
		}()
	}
}

// chance draws a fault with probability p.
func (s *Server) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	s.randMu.Lock()
	defer s.randMu.Unlock()
	return s.rnd.Float64() < p
}

// randInt63n draws uniformly from [0, n).
func (s *Server) randInt63n(n int64) int64 {
	if n <= 0 {
		return 0
	}
	s.randMu.Lock()
	defer s.randMu.Unlock()
	return s.rnd.Int63n(n)
}

// sleep waits d or until the server closes.
func (s *Server) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.done:
	}
}
