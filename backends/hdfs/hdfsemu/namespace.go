package hdfsemu

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	common "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_common"
	pb "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_hdfs"
)

// Java exception classes the client interprets.
const (
	exFileNotFound       = "java.io.FileNotFoundException"
	exIO                 = "java.io.IOException"
	exAccessControl      = "org.apache.hadoop.security.AccessControlException"
	exNotEmpty           = "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException"
	exAlreadyExists      = "org.apache.hadoop.fs.FileAlreadyExistsException"
	exBeingCreated       = "org.apache.hadoop.hdfs.protocol.AlreadyBeingCreatedException"
	exParentNotDirectory = "org.apache.hadoop.fs.ParentNotDirectoryException"
	exSafeMode           = "org.apache.hadoop.hdfs.server.namenode.SafeModeException"
	exLeaseExpired       = "org.apache.hadoop.hdfs.server.namenode.LeaseExpiredException"
	exInvalidPath        = "org.apache.hadoop.fs.InvalidPathException"
	exRetriable          = "org.apache.hadoop.ipc.RetriableException"
	exNoSuchMethod       = "org.apache.hadoop.ipc.RpcNoSuchMethodException"
)

// remoteError is a Java exception sent back over RPC.
type remoteError struct {
	class, msg string
}

func (e *remoteError) Error() string { return e.class + ": " + e.msg }

func rerr(class, format string, args ...any) error {
	return &remoteError{class: class, msg: fmt.Sprintf(format, args...)}
}

const poolID = "BP-mlfsd-hdfsemu"

// blockKey identifies a block by file (file id) and start offset.
type blockKey struct {
	fid   uint64 // file id
	start int64
}

// blockRef maps a block id back to a byte range of a file.
type blockRef struct {
	path  string // HDFS path of the file (kept current across renames)
	fid   uint64
	start int64
	// size caps the block's length (the file's block size).
	size int64
	// gen is the generation stamp handed out with the block.
	gen uint64
	// uc marks a block of a file under construction: the DataNode accepts
	// writes to it only then.
	uc bool
}

// ucFile is a file under construction (between create/append and complete).
type ucFile struct {
	client    string
	fid       uint64
	blockSize int64
	blocks    []uint64 // ids of the blocks added so far, in order
}

// hostPath maps an HDFS path to the local path under root. It refuses
// relative paths and "." or ".." segments, which HDFS also refuses.
func (s *Server) hostPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", rerr(exInvalidPath, "Invalid path name %s: not absolute", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return "", rerr(exInvalidPath, "Invalid path name %s", p)
		}
	}
	return filepath.Join(s.root, filepath.FromSlash(path.Clean(p))), nil
}

// cleanPath returns p in canonical form ("/a/b").
func cleanPath(p string) string { return path.Clean("/" + p) }

// fileID is the HDFS file id of the file at host path hp: its inode number
// mixed with its birth time. HDFS never reuses a file id, while a local file
// system reuses inode numbers at once; the birth time keeps a file written
// over a deleted one (same inode, same size, same millisecond) from getting
// the id, and so the version, of its predecessor. Both survive renames.
func fileID(hp string, fi fs.FileInfo) uint64 {
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, hp, 0, unix.STATX_INO|unix.STATX_BTIME, &stx); err == nil && stx.Mask&unix.STATX_BTIME != 0 {
		if stx.Ino != ino && ino != 0 {
			return ino // replaced between the two calls: the caller retries
		}
		birth := uint64(stx.Btime.Sec)*1e9 + uint64(stx.Btime.Nsec)
		return ino*0x9e3779b97f4a7c15 ^ birth
	}
	return ino
}

// nameOf returns the user or group name for a numeric id, cached.
// Requires s.mu.
func (s *Server) nameOfLocked(id uint32, group bool) string {
	key := uint64(id) << 1
	if group {
		key |= 1
	}
	if n, ok := s.names[key]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(id), 10)
	if group {
		if g, err := user.LookupGroupId(n); err == nil {
			n = g.Name
		}
	} else if u, err := user.LookupId(n); err == nil {
		n = u.Username
	}
	s.names[key] = n
	return n
}

// ownerLocked returns the HDFS owner and group of a path.
func (s *Server) ownerLocked(p string, fi fs.FileInfo) (owner, group string) {
	owner, group = s.opt.Superuser, "supergroup"
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = s.nameOfLocked(st.Uid, false)
		group = s.nameOfLocked(st.Gid, true)
	}
	if o, ok := s.owners[cleanPath(p)]; ok {
		owner = o
	}
	return owner, group
}

// statusLocked builds the HdfsFileStatusProto of p. name is what goes in
// the path field: the local name in listings, "" for getFileInfo.
func (s *Server) statusLocked(p string, fi fs.FileInfo, name string) *pb.HdfsFileStatusProto {
	owner, group := s.ownerLocked(p, fi)
	mtime := uint64(fi.ModTime().UnixMilli())
	atime := mtime
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		atime = uint64(st.Atim.Sec*1000 + st.Atim.Nsec/1e6)
	}
	st := &pb.HdfsFileStatusProto{
		FileType:         pb.HdfsFileStatusProto_IS_FILE.Enum(),
		Path:             []byte(name),
		Length:           proto.Uint64(uint64(fi.Size())),
		Permission:       &pb.FsPermissionProto{Perm: proto.Uint32(uint32(fi.Mode().Perm()))},
		Owner:            proto.String(owner),
		Group:            proto.String(group),
		ModificationTime: proto.Uint64(mtime),
		AccessTime:       proto.Uint64(atime),
		FileId:           proto.Uint64(fileID(filepath.Join(s.root, filepath.FromSlash(cleanPath(p))), fi)),
	}
	if fi.IsDir() {
		st.FileType = pb.HdfsFileStatusProto_IS_DIR.Enum()
		st.Length = proto.Uint64(0)
		st.AccessTime = proto.Uint64(0)
		// childrenNum stays unset (-1, "unknown"): counting would read
		// the whole directory on every stat.
	} else {
		bs := s.opt.BlockSize
		if u, ok := s.uc[cleanPath(p)]; ok {
			bs = u.blockSize
		}
		st.BlockReplication = proto.Uint32(1)
		st.Blocksize = proto.Uint64(uint64(bs))
	}
	return st
}

// lookup stats an HDFS path. A missing path, or one passing through a
// regular file, is reported as (nil, nil): HDFS answers null there.
func (s *Server) lookup(p string) (fs.FileInfo, error) {
	hp, err := s.hostPath(p)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(hp)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, rerr(exIO, "%s: %v", p, err)
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return nil, nil // sockets, devices: not part of an HDFS namespace
	}
	return fi, nil
}

// Permission bits, as in FsAction.
const (
	permRead  = 4
	permWrite = 2
	permExec  = 1
)

// checkAccessLocked enforces HDFS permissions for user: EXECUTE on every
// ancestor of p, and want on p itself (or on its parent when parent is
// set). The superuser passes everything. Group membership is not modelled:
// users other than the owner get the "other" bits.
func (s *Server) checkAccessLocked(user, p string, want uint32, parent bool) error {
	if user == s.opt.Superuser {
		return nil
	}
	p = cleanPath(p)
	target := p
	if parent {
		target = path.Dir(p)
	}
	// Walk the ancestors of target, root first.
	var dirs []string
	for d := path.Dir(target); ; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
		if d == "/" {
			break
		}
	}
	if target == "/" {
		dirs = nil
	}
	for _, d := range dirs {
		fi, err := s.lookup(d)
		if err != nil || fi == nil {
			return nil // missing ancestors fail later with FileNotFound
		}
		if !s.allowedLocked(user, d, fi, permExec) {
			return rerr(exAccessControl, "Permission denied: user=%s, access=EXECUTE, inode=%q", user, d)
		}
	}
	if want == 0 {
		return nil
	}
	fi, err := s.lookup(target)
	if err != nil || fi == nil {
		return nil
	}
	if !s.allowedLocked(user, target, fi, want) {
		return rerr(exAccessControl, "Permission denied: user=%s, access=%s, inode=%q", user, actionName(want), target)
	}
	return nil
}

func (s *Server) allowedLocked(user, p string, fi fs.FileInfo, want uint32) bool {
	mode := uint32(fi.Mode().Perm())
	owner, _ := s.ownerLocked(p, fi)
	bits := mode & 7
	if owner == user {
		bits = mode >> 6 & 7
	}
	return bits&want == want
}

func actionName(a uint32) string {
	b := []byte("---")
	if a&permRead != 0 {
		b[0] = 'r'
	}
	if a&permWrite != 0 {
		b[1] = 'w'
	}
	if a&permExec != 0 {
		b[2] = 'x'
	}
	return string(b)
}

// blockIDLocked returns the stable id of the block of file ino starting at
// start, allocating it on first use.
func (s *Server) blockIDLocked(p string, ino uint64, start, size int64) (uint64, *blockRef) {
	k := blockKey{fid: ino, start: start}
	if id, ok := s.blockKeys[k]; ok {
		ref := s.blocks[id]
		ref.path, ref.size = cleanPath(p), size
		return id, ref
	}
	s.nextBlock++
	id := s.nextBlock
	ref := &blockRef{path: cleanPath(p), fid: ino, start: start, size: size, gen: 1001}
	s.blocks[id] = ref
	s.blockKeys[k] = id
	return id, ref
}

// forgetBlocksLocked drops the block table entries of inode ino, so a file
// rewritten in place gets fresh ids.
func (s *Server) forgetBlocksLocked(ino uint64) {
	for k, id := range s.blockKeys {
		if k.fid == ino {
			delete(s.blockKeys, k)
			delete(s.blocks, id)
		}
	}
}

// movePathsLocked rewrites the paths recorded for src and everything below
// it after a rename to dst.
func (s *Server) movePathsLocked(src, dst string) {
	src, dst = cleanPath(src), cleanPath(dst)
	move := func(p string) (string, bool) {
		if p == src {
			return dst, true
		}
		if strings.HasPrefix(p, src+"/") {
			return dst + p[len(src):], true
		}
		return p, false
	}
	for _, ref := range s.blocks {
		if np, ok := move(ref.path); ok {
			ref.path = np
		}
	}
	for p, u := range s.uc {
		if np, ok := move(p); ok {
			delete(s.uc, p)
			s.uc[np] = u
		}
	}
	for p, o := range s.owners {
		if np, ok := move(p); ok {
			delete(s.owners, p)
			s.owners[np] = o
		}
	}
}

// dropPathsLocked forgets state recorded for p and everything below it.
func (s *Server) dropPathsLocked(p string) {
	p = cleanPath(p)
	under := func(q string) bool { return q == p || strings.HasPrefix(q, p+"/") || p == "/" }
	for id, ref := range s.blocks {
		if under(ref.path) {
			delete(s.blocks, id)
			delete(s.blockKeys, blockKey{fid: ref.fid, start: ref.start})
		}
	}
	for q := range s.uc {
		if under(q) {
			delete(s.uc, q)
		}
	}
	for q := range s.owners {
		if under(q) {
			delete(s.owners, q)
		}
	}
}

// locatedBlock describes one block for a client. dnIP is the address the
// client reached the NameNode at, used when the DataNode listens on all
// interfaces.
func (s *Server) locatedBlock(id uint64, ref *blockRef, numBytes int64, dnIP string) *pb.LocatedBlockProto {
	return &pb.LocatedBlockProto{
		B: &pb.ExtendedBlockProto{
			PoolId:          proto.String(poolID),
			BlockId:         proto.Uint64(id),
			GenerationStamp: proto.Uint64(ref.gen),
			NumBytes:        proto.Uint64(uint64(numBytes)),
		},
		Offset:       proto.Uint64(uint64(ref.start)),
		Locs:         []*pb.DatanodeInfoProto{s.datanodeInfo(dnIP)},
		Corrupt:      proto.Bool(false),
		BlockToken:   emptyToken(),
		IsCached:     []bool{false},
		StorageTypes: []pb.StorageTypeProto{pb.StorageTypeProto_DISK},
		StorageIDs:   []string{"DS-mlfsd-hdfsemu"},
	}
}

func emptyToken() *common.TokenProto {
	return &common.TokenProto{
		Identifier: []byte{},
		Password:   []byte{},
		Kind:       proto.String(""),
		Service:    proto.String(""),
	}
}

func (s *Server) datanodeInfo(clientSideIP string) *pb.DatanodeInfoProto {
	addr := s.dnLn.Addr().(*net.TCPAddr)
	ip := addr.IP.String()
	if addr.IP.IsUnspecified() && clientSideIP != "" {
		ip = clientSideIP
	}
	return &pb.DatanodeInfoProto{
		Id: &pb.DatanodeIDProto{
			IpAddr:       proto.String(ip),
			HostName:     proto.String(ip),
			DatanodeUuid: proto.String("mlfsd-hdfsemu-dn"),
			XferPort:     proto.Uint32(uint32(addr.Port)),
			InfoPort:     proto.Uint32(0),
			IpcPort:      proto.Uint32(0),
		},
		Capacity:   proto.Uint64(0),
		AdminState: pb.DatanodeInfoProto_NORMAL.Enum(),
	}
}
