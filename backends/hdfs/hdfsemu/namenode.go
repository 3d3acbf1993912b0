package hdfsemu

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_hdfs"
)

// CreateFlag bits (org.apache.hadoop.fs.CreateFlag).
const (
	flagCreate    = 0x01
	flagOverwrite = 0x02
	flagAppend    = 0x04
)

// call runs one ClientNamenodeProtocol method.
func (s *Server) call(sess *session, method string, body []byte) (proto.Message, error) {
	switch method {
	case "getFileInfo":
		return handle(body, &pb.GetFileInfoRequestProto{}, func(r *pb.GetFileInfoRequestProto) (proto.Message, error) { return s.getFileInfo(sess, r) })
	case "getListing":
		return handle(body, &pb.GetListingRequestProto{}, func(r *pb.GetListingRequestProto) (proto.Message, error) { return s.getListing(sess, r) })
	case "getBlockLocations":
		return handle(body, &pb.GetBlockLocationsRequestProto{}, func(r *pb.GetBlockLocationsRequestProto) (proto.Message, error) { return s.getBlockLocations(sess, r) })
	case "create":
		return handle(body, &pb.CreateRequestProto{}, func(r *pb.CreateRequestProto) (proto.Message, error) { return s.create(sess, r) })
	case "addBlock":
		return handle(body, &pb.AddBlockRequestProto{}, func(r *pb.AddBlockRequestProto) (proto.Message, error) { return s.addBlock(sess, r) })
	case "updateBlockForPipeline":
		return handle(body, &pb.UpdateBlockForPipelineRequestProto{}, func(r *pb.UpdateBlockForPipelineRequestProto) (proto.Message, error) {
			return s.updateBlockForPipeline(sess, r)
		})
	case "complete":
		return handle(body, &pb.CompleteRequestProto{}, func(r *pb.CompleteRequestProto) (proto.Message, error) { return s.complete(sess, r) })
	case "append":
		return handle(body, &pb.AppendRequestProto{}, func(r *pb.AppendRequestProto) (proto.Message, error) { return s.append(sess, r) })
	case "rename2":
		return handle(body, &pb.Rename2RequestProto{}, func(r *pb.Rename2RequestProto) (proto.Message, error) { return s.rename2(sess, r) })
	case "delete":
		return handle(body, &pb.DeleteRequestProto{}, func(r *pb.DeleteRequestProto) (proto.Message, error) { return s.delete(sess, r) })
	case "mkdirs":
		return handle(body, &pb.MkdirsRequestProto{}, func(r *pb.MkdirsRequestProto) (proto.Message, error) { return s.mkdirs(sess, r) })
	case "truncate":
		return handle(body, &pb.TruncateRequestProto{}, func(r *pb.TruncateRequestProto) (proto.Message, error) { return s.truncate(sess, r) })
	case "setTimes":
		return handle(body, &pb.SetTimesRequestProto{}, func(r *pb.SetTimesRequestProto) (proto.Message, error) { return s.setTimes(sess, r) })
	case "setPermission":
		return handle(body, &pb.SetPermissionRequestProto{}, func(r *pb.SetPermissionRequestProto) (proto.Message, error) { return s.setPermission(sess, r) })
	case "setOwner":
		return handle(body, &pb.SetOwnerRequestProto{}, func(r *pb.SetOwnerRequestProto) (proto.Message, error) { return s.setOwner(sess, r) })
	case "renewLease":
		return handle(body, &pb.RenewLeaseRequestProto{}, func(*pb.RenewLeaseRequestProto) (proto.Message, error) { return &pb.RenewLeaseResponseProto{}, nil })
	case "getServerDefaults":
		return s.getServerDefaults(), nil
	case "getFsStats":
		return s.getFsStats()
	case "getContentSummary":
		return handle(body, &pb.GetContentSummaryRequestProto{}, func(r *pb.GetContentSummaryRequestProto) (proto.Message, error) { return s.getContentSummary(sess, r) })
	default:
		return nil, rerr(exNoSuchMethod, "Unknown method %s called on %s protocol (not emulated by hdfsemu)", method, clientProtocol)
	}
}

func handle[R proto.Message](body []byte, req R, f func(R) (proto.Message, error)) (proto.Message, error) {
	if err := proto.Unmarshal(body, req); err != nil {
		return nil, rerr(exIO, "malformed request: %v", err)
	}
	return f(req)
}

func (s *Server) checkSafeModeLocked(op, p string) error {
	if s.safeMode {
		s.safeModeRefusals++
		return rerr(exSafeMode, "Cannot %s %s. Name node is in safe mode.", op, p)
	}
	return nil
}

// mayChangeLocked is the preamble of a request that changes src: refused
// in safe mode (op says the change as the NameNode's message does), then
// unless user may access src (parent: its parent directory) with want.
func (s *Server) mayChangeLocked(sess *session, op, src string, want uint32, parent bool) error {
	if err := s.checkSafeModeLocked(op, src); err != nil {
		return err
	}
	return s.checkAccessLocked(sess.user, src, want, parent)
}

func (s *Server) getFileInfo(sess *session, r *pb.GetFileInfoRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkAccessLocked(sess.user, r.GetSrc(), 0, false); err != nil {
		return nil, err
	}
	fi, err := s.lookup(r.GetSrc())
	if err != nil || fi == nil {
		return &pb.GetFileInfoResponseProto{}, err
	}
	return &pb.GetFileInfoResponseProto{Fs: s.statusLocked(r.GetSrc(), fi, "")}, nil
}

func (s *Server) getListing(sess *session, r *pb.GetListingRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := r.GetSrc()
	fi, err := s.lookup(src)
	if err != nil || fi == nil {
		return &pb.GetListingResponseProto{}, err
	}
	if !fi.IsDir() {
		// HDFS lists a file as itself.
		st := s.statusLocked(src, fi, path.Base(cleanPath(src)))
		return &pb.GetListingResponseProto{DirList: &pb.DirectoryListingProto{
			PartialListing: []*pb.HdfsFileStatusProto{st}, RemainingEntries: proto.Uint32(0),
		}}, nil
	}
	if err := s.checkAccessLocked(sess.user, src, permRead|permExec, false); err != nil {
		return nil, err
	}
	hp, _ := s.hostPath(src)
	// Sorted by name, HDFS's byte order; from the index of a wide
	// directory, so a page costs a binary search and the page.
	ents, ok := s.dirs.Entries(hp)
	if !ok {
		return nil, rerr(exIO, "listing %s: cannot read the directory", src)
	}
	after := string(r.GetStartAfter())
	i := sort.Search(len(ents), func(i int) bool { return ents[i].Name > after })
	list := &pb.DirectoryListingProto{}
	for ; i < len(ents) && len(list.PartialListing) < s.opt.ListingLimit; i++ {
		child := path.Join(cleanPath(src), ents[i].Name)
		cfi, err := s.lookup(child)
		if err != nil || cfi == nil {
			continue // vanished, or not a file or directory
		}
		list.PartialListing = append(list.PartialListing, s.statusLocked(child, cfi, ents[i].Name))
	}
	list.RemainingEntries = proto.Uint32(uint32(len(ents) - i))
	return &pb.GetListingResponseProto{DirList: list}, nil
}

func (s *Server) getBlockLocations(sess *session, r *pb.GetBlockLocationsRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := r.GetSrc()
	if err := s.checkAccessLocked(sess.user, src, permRead, false); err != nil {
		return nil, err
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if fi == nil {
		return nil, rerr(exFileNotFound, "File does not exist: %s", src)
	}
	if fi.IsDir() {
		return nil, rerr(exFileNotFound, "Path is not a file: %s", src)
	}
	size := fi.Size()
	u := s.uc[cleanPath(src)]
	bs := s.opt.BlockSize
	if u != nil {
		bs = u.blockSize
	}
	locs := &pb.LocatedBlocksProto{
		FileLength:          proto.Uint64(uint64(size)),
		UnderConstruction:   proto.Bool(u != nil),
		IsLastBlockComplete: proto.Bool(u == nil),
	}
	from, length := int64(r.GetOffset()), int64(min(r.GetLength(), math.MaxInt64/2))
	hp, _ := s.hostPath(src)
	fid := fileID(hp, fi)
	for start := from - from%bs; start < size && start < from+length; start += bs {
		n := min(bs, size-start)
		id, ref := s.blockIDLocked(src, fid, start, bs)
		locs.Blocks = append(locs.Blocks, s.locatedBlock(id, ref, n, sess.localIP))
	}
	return &pb.GetBlockLocationsResponseProto{Locations: locs}, nil
}

// parentCheckLocked verifies that p's parent exists and is a directory,
// creating it when createParent is set.
func (s *Server) parentCheckLocked(p string, createParent bool, perm fs.FileMode) error {
	parent := path.Dir(cleanPath(p))
	hp, err := s.hostPath(parent)
	if err != nil {
		return err
	}
	fi, err := os.Stat(hp)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil, errors.Is(err, syscall.ENOTDIR):
		return rerr(exParentNotDirectory, "Parent path is not a directory: %s", parent)
	case errors.Is(err, fs.ErrNotExist):
		if !createParent {
			return rerr(exFileNotFound, "Parent directory doesn't exist: %s", parent)
		}
		s.changed(hp)
		if err := os.MkdirAll(hp, perm|0o700); err != nil {
			if errors.Is(err, syscall.ENOTDIR) {
				return rerr(exParentNotDirectory, "Parent path is not a directory: %s", parent)
			}
			return rerr(exIO, "mkdirs %s: %v", parent, err)
		}
		return nil
	default:
		return rerr(exIO, "%s: %v", parent, err)
	}
}

func (s *Server) create(sess *session, r *pb.CreateRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := cleanPath(r.GetSrc())
	if src == "/" {
		return nil, rerr(exAlreadyExists, "/ already exists as a directory")
	}
	if err := s.mayChangeLocked(sess, "create", src, permWrite|permExec, true); err != nil {
		return nil, err
	}
	hp, err := s.hostPath(src)
	if err != nil {
		return nil, err
	}
	if u, ok := s.uc[src]; ok {
		return nil, rerr(exBeingCreated, "Failed to CREATE_FILE %s for %s: already being created by %s", src, r.GetClientName(), u.client)
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	flag := r.GetCreateFlag()
	if fi != nil {
		if fi.IsDir() {
			return nil, rerr(exAlreadyExists, "%s already exists as a directory", src)
		}
		if flag&flagOverwrite == 0 {
			return nil, rerr(exAlreadyExists, "%s for client %s already exists", src, r.GetClientName())
		}
	}
	if err := s.parentCheckLocked(src, r.GetCreateParent(), 0o755); err != nil {
		return nil, err
	}
	bs := int64(r.GetBlockSize())
	if bs <= 0 || bs%512 != 0 {
		return nil, rerr("org.apache.hadoop.HadoopIllegalArgumentException", "block size %d is not a positive multiple of 512", bs)
	}
	perm := fs.FileMode(r.GetMasked().GetPerm()) & fs.ModePerm
	if perm == 0 {
		perm = 0o644
	}
	if fi != nil {
		s.forgetBlocksLocked(fileID(hp, fi))
		// HDFS deletes the old file; a new inode keeps cached block ids apart.
		s.changed(hp)
		if err := os.Remove(hp); err != nil {
			return nil, rerr(exIO, "overwrite %s: %v", src, err)
		}
	}
	s.changed(hp)
	f, err := os.OpenFile(hp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return nil, rerr(exIO, "create %s: %v", src, err)
	}
	f.Close()
	os.Chmod(hp, perm) // not subject to the umask, as in HDFS (masked is already masked)
	nfi, err := os.Stat(hp)
	if err != nil {
		return nil, rerr(exIO, "create %s: %v", src, err)
	}
	s.uc[src] = &ucFile{client: r.GetClientName(), fid: fileID(hp, nfi), blockSize: bs}
	sess.clients[r.GetClientName()] = true
	if sess.user != "" && sess.user != s.opt.Superuser {
		s.owners[src] = sess.user
	}
	return &pb.CreateResponseProto{Fs: s.statusLocked(src, nfi, "")}, nil
}

// ucLocked returns the file under construction src, held by client.
func (s *Server) ucLocked(src, client string, fileID uint64) (*ucFile, error) {
	u, ok := s.uc[cleanPath(src)]
	if !ok || u.client != client || (fileID != 0 && fileID != u.fid) {
		return nil, rerr(exLeaseExpired, "No lease on %s: file is not open for writing by %s", src, client)
	}
	return u, nil
}

func (s *Server) addBlock(sess *session, r *pb.AddBlockRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := cleanPath(r.GetSrc())
	if err := s.checkSafeModeLocked("add block to", src); err != nil {
		return nil, err
	}
	u, err := s.ucLocked(src, r.GetClientName(), r.GetFileId())
	if err != nil {
		return nil, err
	}
	// The new block starts where the previous one ended.
	var start int64
	if prev := r.GetPrevious(); prev != nil {
		ref, ok := s.blocks[prev.GetBlockId()]
		if !ok || ref.fid != u.fid {
			return nil, rerr(exIO, "addBlock %s: unknown previous block %d", src, prev.GetBlockId())
		}
		start = ref.start + int64(prev.GetNumBytes())
		ref.uc = false
	} else if len(u.blocks) > 0 {
		return nil, rerr(exIO, "addBlock %s: previous block missing", src)
	}
	id, ref := s.blockIDLocked(src, u.fid, start, u.blockSize)
	ref.uc = true
	u.blocks = append(u.blocks, id)
	return &pb.AddBlockResponseProto{Block: s.locatedBlock(id, ref, 0, sess.localIP)}, nil
}

func (s *Server) updateBlockForPipeline(sess *session, r *pb.UpdateBlockForPipelineRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := r.GetBlock()
	ref, ok := s.blocks[b.GetBlockId()]
	if !ok {
		return nil, rerr(exIO, "updateBlockForPipeline: unknown block %d", b.GetBlockId())
	}
	ref.gen++
	return &pb.UpdateBlockForPipelineResponseProto{Block: s.locatedBlock(b.GetBlockId(), ref, int64(b.GetNumBytes()), sess.localIP)}, nil
}

func (s *Server) complete(sess *session, r *pb.CompleteRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := cleanPath(r.GetSrc())
	if err := s.checkSafeModeLocked("complete", src); err != nil {
		return nil, err
	}
	u, err := s.ucLocked(src, r.GetClientName(), r.GetFileId())
	if err != nil {
		return nil, err
	}
	hp, err := s.hostPath(src)
	if err != nil {
		return nil, err
	}
	var length int64
	if last := r.GetLast(); last != nil {
		ref, ok := s.blocks[last.GetBlockId()]
		if !ok || ref.fid != u.fid {
			return nil, rerr(exIO, "complete %s: unknown last block %d", src, last.GetBlockId())
		}
		length = ref.start + int64(last.GetNumBytes())
	} else if len(u.blocks) > 0 {
		return nil, rerr(exIO, "complete %s: last block missing", src)
	}
	if err := os.Truncate(hp, length); err != nil {
		return nil, rerr(exIO, "complete %s: %v", src, err)
	}
	for _, id := range u.blocks {
		if ref, ok := s.blocks[id]; ok {
			ref.uc = false
		}
	}
	// Blocks of a completed file are re-cut at the file's block size on
	// the next getBlockLocations; drop the construction-time ids.
	s.forgetBlocksLocked(u.fid)
	delete(s.uc, src)
	return &pb.CompleteResponseProto{Result: proto.Bool(true)}, nil
}

func (s *Server) append(sess *session, r *pb.AppendRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := cleanPath(r.GetSrc())
	if err := s.mayChangeLocked(sess, "append to", src, permWrite, false); err != nil {
		return nil, err
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if fi == nil {
		return nil, rerr(exFileNotFound, "Failed to append to non-existent file %s", src)
	}
	if fi.IsDir() {
		return nil, rerr(exFileNotFound, "Failed to append to directory %s", src)
	}
	if u, ok := s.uc[src]; ok {
		return nil, rerr(exBeingCreated, "Failed to APPEND_FILE %s for %s: already being written by %s", src, r.GetClientName(), u.client)
	}
	bs := s.opt.BlockSize
	hp, _ := s.hostPath(src)
	u := &ucFile{client: r.GetClientName(), fid: fileID(hp, fi), blockSize: bs}
	s.forgetBlocksLocked(u.fid)
	resp := &pb.AppendResponseProto{Stat: s.statusLocked(src, fi, "")}
	if tail := fi.Size() % bs; tail != 0 {
		id, ref := s.blockIDLocked(src, u.fid, fi.Size()-tail, bs)
		ref.uc = true
		u.blocks = append(u.blocks, id)
		resp.Block = s.locatedBlock(id, ref, tail, sess.localIP)
	}
	s.uc[src] = u
	sess.clients[r.GetClientName()] = true
	return resp, nil
}

func (s *Server) rename2(sess *session, r *pb.Rename2RequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src, dst := cleanPath(r.GetSrc()), cleanPath(r.GetDst())
	if err := s.mayChangeLocked(sess, "rename", src, permWrite|permExec, true); err != nil {
		return nil, err
	}
	if err := s.checkAccessLocked(sess.user, dst, permWrite|permExec, true); err != nil {
		return nil, err
	}
	if src == "/" || dst == "/" {
		return nil, rerr(exIO, "rename %s to %s: the root cannot be renamed or replaced", src, dst)
	}
	sfi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if sfi == nil {
		return nil, rerr(exFileNotFound, "rename source %s is not found.", src)
	}
	if src == dst {
		return &pb.Rename2ResponseProto{}, nil
	}
	if len(dst) > len(src) && dst[:len(src)+1] == src+"/" {
		return nil, rerr(exIO, "rename %s to %s: destination is a descendant of the source", src, dst)
	}
	dfi, err := s.lookup(dst)
	if err != nil {
		return nil, err
	}
	if dfi != nil {
		if !r.GetOverwriteDest() {
			return nil, rerr(exAlreadyExists, "rename destination %s already exists.", dst)
		}
		if dfi.IsDir() != sfi.IsDir() {
			return nil, rerr(exIO, "Source %s and destination %s must both be directories", src, dst)
		}
	}
	if err := s.parentCheckLocked(dst, false, 0); err != nil {
		return nil, err
	}
	shp, _ := s.hostPath(src)
	dhp, _ := s.hostPath(dst)
	s.changed(shp)
	s.changed(dhp)
	if err := os.Rename(shp, dhp); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return nil, rerr(exIO, "rename destination directory is not empty: %s", dst)
		}
		return nil, rerr(exIO, "rename %s to %s: %v", src, dst, err)
	}
	if dfi != nil {
		s.dropPathsLocked(dst)
	}
	s.movePathsLocked(src, dst)
	return &pb.Rename2ResponseProto{}, nil
}

func (s *Server) delete(sess *session, r *pb.DeleteRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := cleanPath(r.GetSrc())
	if src == "/" {
		return nil, rerr(exIO, "the root directory cannot be deleted")
	}
	if err := s.mayChangeLocked(sess, "delete", src, permWrite|permExec, true); err != nil {
		return nil, err
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if fi == nil {
		return &pb.DeleteResponseProto{Result: proto.Bool(false)}, nil
	}
	hp, _ := s.hostPath(src)
	s.changed(hp)
	if fi.IsDir() && !r.GetRecursive() {
		if err := os.Remove(hp); err != nil {
			if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
				return nil, rerr(exNotEmpty, "`%s is non empty': Directory is not empty", src)
			}
			return nil, rerr(exIO, "delete %s: %v", src, err)
		}
	} else if err := os.RemoveAll(hp); err != nil {
		return nil, rerr(exIO, "delete %s: %v", src, err)
	}
	s.dropPathsLocked(src)
	return &pb.DeleteResponseProto{Result: proto.Bool(true)}, nil
}

func (s *Server) mkdirs(sess *session, r *pb.MkdirsRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := cleanPath(r.GetSrc())
	if err := s.checkSafeModeLocked("create directory", src); err != nil {
		return nil, err
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if fi != nil {
		if fi.IsDir() {
			return &pb.MkdirsResponseProto{Result: proto.Bool(true)}, nil
		}
		return nil, rerr(exAlreadyExists, "Path is not a directory: %s", src)
	}
	if err := s.checkAccessLocked(sess.user, src, permWrite|permExec, true); err != nil {
		// The nearest existing ancestor decides; checkAccess already
		// skipped missing ones.
		return nil, err
	}
	perm := fs.FileMode(r.GetMasked().GetPerm()) & fs.ModePerm
	if perm == 0 {
		perm = 0o755
	}
	if err := s.parentCheckLocked(src, r.GetCreateParent(), perm); err != nil {
		return nil, err
	}
	hp, _ := s.hostPath(src)
	s.changed(hp)
	if err := os.Mkdir(hp, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, rerr(exIO, "mkdirs %s: %v", src, err)
	}
	os.Chmod(hp, perm)
	if sess.user != "" && sess.user != s.opt.Superuser {
		s.owners[src] = sess.user
	}
	return &pb.MkdirsResponseProto{Result: proto.Bool(true)}, nil
}

func (s *Server) setTimes(sess *session, r *pb.SetTimesRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := r.GetSrc()
	if err := s.mayChangeLocked(sess, "set times of", src, permWrite, false); err != nil {
		return nil, err
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if fi == nil {
		return nil, rerr(exFileNotFound, "File/Directory %s does not exist.", src)
	}
	hp, _ := s.hostPath(src)
	mtime, atime := fi.ModTime(), fi.ModTime()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		atime = time.Unix(st.Atim.Sec, st.Atim.Nsec)
	}
	// -1 (all ones) leaves a time unchanged.
	if r.GetMtime() != math.MaxUint64 {
		mtime = time.UnixMilli(int64(r.GetMtime()))
	}
	if r.GetAtime() != math.MaxUint64 {
		atime = time.UnixMilli(int64(r.GetAtime()))
	}
	if err := os.Chtimes(hp, atime, mtime); err != nil {
		return nil, rerr(exIO, "setTimes %s: %v", src, err)
	}
	return &pb.SetTimesResponseProto{}, nil
}

func (s *Server) setPermission(sess *session, r *pb.SetPermissionRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := r.GetSrc()
	if err := s.checkSafeModeLocked("set permission for", src); err != nil {
		return nil, err
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if fi == nil {
		return nil, rerr(exFileNotFound, "File does not exist: %s", src)
	}
	if owner, _ := s.ownerLocked(src, fi); sess.user != s.opt.Superuser && sess.user != owner {
		return nil, rerr(exAccessControl, "Permission denied: user=%s is not the owner of inode=%s", sess.user, src)
	}
	hp, _ := s.hostPath(src)
	if err := os.Chmod(hp, fs.FileMode(r.GetPermission().GetPerm())&fs.ModePerm); err != nil {
		return nil, rerr(exIO, "setPermission %s: %v", src, err)
	}
	return &pb.SetPermissionResponseProto{}, nil
}

func (s *Server) setOwner(sess *session, r *pb.SetOwnerRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := r.GetSrc()
	if err := s.checkSafeModeLocked("set owner for", src); err != nil {
		return nil, err
	}
	if sess.user != s.opt.Superuser {
		return nil, rerr(exAccessControl, "Permission denied: only the superuser can change owners (%s)", src)
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if fi == nil {
		return nil, rerr(exFileNotFound, "File does not exist: %s", src)
	}
	if r.GetUsername() != "" {
		s.owners[cleanPath(src)] = r.GetUsername()
	}
	return &pb.SetOwnerResponseProto{}, nil
}

func (s *Server) getServerDefaults() proto.Message {
	return &pb.GetServerDefaultsResponseProto{ServerDefaults: &pb.FsServerDefaultsProto{
		BlockSize:        proto.Uint64(uint64(s.opt.BlockSize)),
		BytesPerChecksum: proto.Uint32(chunkSize),
		WritePacketSize:  proto.Uint32(64 << 10),
		Replication:      proto.Uint32(1),
		FileBufferSize:   proto.Uint32(4096),
		ChecksumType:     pb.ChecksumTypeProto_CHECKSUM_CRC32C.Enum(),
	}}
}

func (s *Server) getFsStats() (proto.Message, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.root, &st); err != nil {
		return nil, rerr(exIO, "statfs: %v", err)
	}
	bsize := uint64(st.Bsize)
	capacity, free := st.Blocks*bsize, st.Bavail*bsize
	return &pb.GetFsStatsResponseProto{
		Capacity:        proto.Uint64(capacity),
		Used:            proto.Uint64(capacity - st.Bfree*bsize),
		Remaining:       proto.Uint64(free),
		UnderReplicated: proto.Uint64(0),
		CorruptBlocks:   proto.Uint64(0),
		MissingBlocks:   proto.Uint64(0),
	}, nil
}

func (s *Server) getContentSummary(sess *session, r *pb.GetContentSummaryRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := r.GetPath()
	if err := s.checkAccessLocked(sess.user, src, 0, false); err != nil {
		return nil, err
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if fi == nil {
		return nil, rerr(exFileNotFound, "File does not exist: %s", src)
	}
	hp, _ := s.hostPath(src)
	var length, files, dirs uint64
	err = filepath.WalkDir(hp, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs++
			return nil
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			files++
			length += uint64(info.Size())
		}
		return nil
	})
	if err != nil {
		return nil, rerr(exIO, "content summary %s: %v", src, err)
	}
	none := uint64(math.MaxUint64) // -1: no quota
	return &pb.GetContentSummaryResponseProto{Summary: &pb.ContentSummaryProto{
		Length:         proto.Uint64(length),
		FileCount:      proto.Uint64(files),
		DirectoryCount: proto.Uint64(dirs),
		Quota:          proto.Uint64(none),
		SpaceConsumed:  proto.Uint64(length),
		SpaceQuota:     proto.Uint64(none),
	}}, nil
}

func (s *Server) truncate(sess *session, r *pb.TruncateRequestProto) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := cleanPath(r.GetSrc())
	if err := s.mayChangeLocked(sess, "truncate", src, permWrite, false); err != nil {
		return nil, err
	}
	fi, err := s.lookup(src)
	if err != nil {
		return nil, err
	}
	if fi == nil || fi.IsDir() {
		return nil, rerr(exFileNotFound, "File does not exist: %s", src)
	}
	if u, ok := s.uc[src]; ok {
		return nil, rerr(exBeingCreated, "Failed to TRUNCATE_FILE %s: being written by %s", src, u.client)
	}
	if int64(r.GetNewLength()) > fi.Size() {
		return nil, rerr("org.apache.hadoop.HadoopIllegalArgumentException", "Cannot truncate to a larger file size. Current size: %d, truncate size: %d.", fi.Size(), r.GetNewLength())
	}
	hp, _ := s.hostPath(src)
	s.forgetBlocksLocked(fileID(hp, fi))
	if err := os.Truncate(hp, int64(r.GetNewLength())); err != nil {
		return nil, rerr(exIO, "truncate %s: %v", src, err)
	}
	// Local truncation is immediate: no block recovery to wait for.
	return &pb.TruncateResponseProto{Result: proto.Bool(true)}, nil
}

// recoverLeases closes the files a client left under construction when its
// connection ends, keeping the bytes its completed packets delivered. HDFS
// does the same by lease recovery once a writer stops renewing its lease;
// the Go client renews over its one NameNode connection, so its end is the
// end of the lease.
func (s *Server) recoverLeases(sess *session) {
	if len(sess.clients) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, u := range s.uc {
		if sess.clients[u.client] {
			s.forgetBlocksLocked(u.fid)
			delete(s.uc, p)
		}
	}
}
