package hdfsemu

import (
	"bufio"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_hdfs"
)

// DataTransferProtocol constants.
const (
	dataTransferVersion = 28
	opWriteBlock        = 80
	opReadBlock         = 81
	opBlockChecksum     = 85
	chunkSize           = 512
	packetData          = 64 << 10 // data bytes per read packet (a multiple of chunkSize)
	maxPacket           = 16 << 20
	heartbeatSeqno      = -1
	// idleTimeout bounds how long a DataNode connection may sit silent.
	idleTimeout = 2 * time.Minute
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// serveDataNode handles one DataTransferProtocol operation per connection,
// as the Go client uses them.
func (s *Server) serveDataNode(c net.Conn) {
	c.SetDeadline(time.Now().Add(idleTimeout))
	tc := &throttledConn{Conn: c, bw: s.opt.Faults.Bandwidth, start: time.Now()}
	r := bufio.NewReaderSize(tc, 128<<10)
	var hdr [3]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	if v := binary.BigEndian.Uint16(hdr[:2]); v != dataTransferVersion {
		s.log.Warn("hdfsemu: datanode: unsupported data transfer version", "version", v)
		return
	}
	var err error
	switch hdr[2] {
	case opReadBlock:
		req := &pb.OpReadBlockProto{}
		if err = readDelimited(r, req); err == nil {
			err = s.readBlock(tc, r, req)
		}
	case opWriteBlock:
		req := &pb.OpWriteBlockProto{}
		if err = readDelimited(r, req); err == nil {
			err = s.writeBlock(tc, r, req)
		}
	case opBlockChecksum:
		req := &pb.OpBlockChecksumProto{}
		if err = readDelimited(r, req); err == nil {
			err = s.blockChecksum(tc, req)
		}
	default:
		err = writeDelimited(tc, &pb.BlockOpResponseProto{
			Status:  pb.Status_ERROR_UNSUPPORTED.Enum(),
			Message: proto.String(fmt.Sprintf("hdfsemu: data transfer op %d is not emulated", hdr[2])),
		})
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errInjectedDrop) {
		s.log.Debug("hdfsemu: datanode", "err", err)
	}
}

var errInjectedDrop = errors.New("injected fault: connection dropped mid-block")

func readDelimited(r *bufio.Reader, m proto.Message) error {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return err
	}
	if n > maxPacket {
		return fmt.Errorf("message of %d bytes too large", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return proto.Unmarshal(b, m)
}

func writeDelimited(w io.Writer, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	out := binary.AppendUvarint(nil, uint64(len(b)))
	_, err = w.Write(append(out, b...))
	return err
}

// blockTarget resolves a block id to its file, checking the file is still
// the one the id was handed out for.
func (s *Server) blockTarget(id uint64, forWrite bool) (ref blockRef, hp string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.blocks[id]
	if !ok {
		return blockRef{}, "", fmt.Errorf("block %d not found (file changed or removed)", id)
	}
	if forWrite && !r.uc {
		return blockRef{}, "", fmt.Errorf("block %d is not under construction", id)
	}
	hp, err = s.hostPath(r.path)
	if err != nil {
		return blockRef{}, "", err
	}
	fi, err := os.Stat(hp)
	if err != nil || fileID(hp, fi) != r.fid {
		return blockRef{}, "", fmt.Errorf("block %d: file %s changed or removed", id, r.path)
	}
	return *r, hp, nil
}

// openBlock opens the block a read or a checksum request names, after the
// injected time to first byte and faults. When it cannot (ok false) it has
// answered the request with the error itself, and err is that answer's.
// blockLen is the length the client knows the block by (its length at
// lookup, else the stored length); negative when the file ends before the
// block starts.
func (s *Server) openBlock(w *throttledConn, b *pb.ExtendedBlockProto) (ref blockRef, f *os.File, blockLen int64, ok bool, err error) {
	ref, hp, err := s.blockTarget(b.GetBlockId(), false)
	s.sleep(s.opt.Faults.TTFB)
	if err != nil {
		return ref, nil, 0, false, opError(w, pb.Status_ERROR, err.Error())
	}
	if s.chance(s.opt.Faults.ErrorRate) {
		return ref, nil, 0, false, opError(w, pb.Status_ERROR, "injected fault: datanode error")
	}
	f, err = os.Open(hp)
	if err != nil {
		return ref, nil, 0, false, opError(w, pb.Status_ERROR, err.Error())
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return ref, nil, 0, false, opError(w, pb.Status_ERROR, err.Error())
	}
	blockLen = min(ref.size, fi.Size()-ref.start)
	if n := int64(b.GetNumBytes()); n > 0 && n < blockLen {
		blockLen = n
	}
	return ref, f, blockLen, true, nil
}

func opError(w io.Writer, status pb.Status, msg string) error {
	return writeDelimited(w, &pb.BlockOpResponseProto{Status: status.Enum(), Message: proto.String(msg)})
}

// readBlock streams [offset, offset+len) of a block as packets of CRC32C
// checksummed 512-byte chunks, starting at the chunk boundary at or below
// offset, and ends with an empty last packet.
func (s *Server) readBlock(w *throttledConn, r *bufio.Reader, req *pb.OpReadBlockProto) error {
	b := req.GetHeader().GetBaseHeader().GetBlock()
	ref, f, blockLen, ok, err := s.openBlock(w, b)
	if !ok {
		return err
	}
	defer f.Close()
	off := int64(req.GetOffset())
	if blockLen < 0 || off > blockLen {
		return opError(w, pb.Status_ERROR_INVALID, fmt.Sprintf("offset %d beyond block length %d", off, blockLen))
	}
	end := min(blockLen, off+int64(min(req.GetLen(), uint64(blockLen))))
	pos := off - off%chunkSize
	withSums := req.SendChecksums == nil || req.GetSendChecksums()
	ck := &pb.ChecksumProto{Type: pb.ChecksumTypeProto_CHECKSUM_CRC32C.Enum(), BytesPerChecksum: proto.Uint32(chunkSize)}
	if !withSums {
		ck.Type = pb.ChecksumTypeProto_CHECKSUM_NULL.Enum()
	}
	err = writeDelimited(w, &pb.BlockOpResponseProto{
		Status:             pb.Status_SUCCESS.Enum(),
		ReadOpChecksumInfo: &pb.ReadOpChecksumInfoProto{Checksum: ck, ChunkOffset: proto.Uint64(uint64(pos))},
	})
	if err != nil {
		return err
	}
	dropAt := int64(-1)
	if end > pos && s.chance(s.opt.Faults.DropRate) {
		dropAt = pos + s.randInt63n(end-pos)
	}
	bw := bufio.NewWriterSize(w, packetData+4096)
	buf := make([]byte, packetData)
	seq := int64(0)
	for pos < end {
		w.SetWriteDeadline(time.Now().Add(idleTimeout))
		n := min(int64(packetData), end-pos)
		data := buf[:n]
		if _, err := f.ReadAt(data, ref.start+pos); err != nil {
			// The file shrank under us: end the stream; the client sees a
			// short block and fails over.
			return err
		}
		if dropAt >= 0 && dropAt < pos+n {
			// Send the packet head and part of the data, then vanish.
			cut := dropAt - pos
			writePacket(bw, pos, seq, false, data, withSums, cut)
			bw.Flush()
			return errInjectedDrop
		}
		if err := writePacket(bw, pos, seq, false, data, withSums, -1); err != nil {
			return err
		}
		pos += n
		seq++
	}
	if err := writePacket(bw, pos, seq, true, nil, withSums, -1); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	// The client may send a ClientReadStatusProto; wait briefly for it (or
	// for it to hang up) so the last packet is not cut off by a reset.
	w.SetReadDeadline(time.Now().Add(5 * time.Second))
	st := &pb.ClientReadStatusProto{}
	readDelimited(r, st)
	return nil
}

// blockChecksum answers OP_BLOCK_CHECKSUM as a Hadoop DataNode does for a
// replicated block (DataXceiver.blockChecksum with
// BlockChecksumHelper.ReplicatedBlockChecksumComputer):
//
//   - MD5CRC (the default): the MD5 of the block's chunk CRCs, each CRC32C
//     of 512 bytes (the last chunk may be short) written as 4 big-endian
//     bytes, exactly the checksum region of the block's .meta file; the
//     client then takes the MD5 of the block MD5s (MD5MD5CRC32C).
//   - COMPOSITE_CRC: the CRC32C of the block's bytes (what composing the
//     chunk CRCs yields), 4 big-endian bytes per stripe of stripeLength
//     bytes (one stripe when 0 or longer than the block).
//
// Both cover the first numBytes of the block that the client names (its
// length when the client looked it up), or the whole block.
func (s *Server) blockChecksum(w *throttledConn, req *pb.OpBlockChecksumProto) error {
	b := req.GetHeader().GetBlock()
	ref, f, blockLen, ok, err := s.openBlock(w, b)
	if !ok {
		return err
	}
	defer f.Close()
	blockLen = max(blockLen, 0)
	opts := req.GetBlockChecksumOptions()
	var sum []byte
	switch opts.GetBlockChecksumType() {
	case pb.BlockChecksumTypeProto_MD5CRC:
		sum, err = blockMD5CRC(io.NewSectionReader(f, ref.start, blockLen))
	case pb.BlockChecksumTypeProto_COMPOSITE_CRC:
		sum, err = blockCompositeCRC(io.NewSectionReader(f, ref.start, blockLen), blockLen, int64(opts.GetStripeLength()))
	default:
		return opError(w, pb.Status_ERROR_INVALID, fmt.Sprintf("unknown block checksum type %v", opts.GetBlockChecksumType()))
	}
	if err != nil {
		return opError(w, pb.Status_ERROR, fmt.Sprintf("block %d: %v", b.GetBlockId(), err))
	}
	if opts == nil {
		opts = &pb.BlockChecksumOptionsProto{BlockChecksumType: pb.BlockChecksumTypeProto_MD5CRC.Enum()}
	}
	return writeDelimited(w, &pb.BlockOpResponseProto{
		Status: pb.Status_SUCCESS.Enum(),
		ChecksumResponse: &pb.OpBlockChecksumResponseProto{
			BytesPerCrc:          proto.Uint32(chunkSize),
			CrcPerBlock:          proto.Uint64(uint64((blockLen + chunkSize - 1) / chunkSize)),
			BlockChecksum:        sum,
			CrcType:              pb.ChecksumTypeProto_CHECKSUM_CRC32C.Enum(),
			BlockChecksumOptions: opts,
		},
	})
}

// blockMD5CRC returns the MD5 of the CRC32C of each 512-byte chunk of r.
func blockMD5CRC(r io.Reader) ([]byte, error) {
	h := md5.New()
	buf := make([]byte, packetData)
	var crc [4]byte
	for {
		n, err := io.ReadFull(r, buf)
		for i := 0; i < n; i += chunkSize {
			binary.BigEndian.PutUint32(crc[:], crc32.Checksum(buf[i:min(i+chunkSize, n)], castagnoli))
			h.Write(crc[:])
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return h.Sum(nil), nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// blockCompositeCRC returns the CRC32C of each stripe of r (n bytes), 4
// big-endian bytes each.
func blockCompositeCRC(r io.Reader, n, stripe int64) ([]byte, error) {
	if stripe <= 0 || stripe > n {
		stripe = n
	}
	var out []byte
	for left := n; left > 0 || len(out) == 0; left -= stripe {
		c := crc32.New(castagnoli)
		if _, err := io.CopyN(c, r, min(stripe, left)); err != nil {
			return nil, err
		}
		out = binary.BigEndian.AppendUint32(out, c.Sum32())
		if left <= stripe {
			break
		}
	}
	return out, nil
}

// writePacket writes one data packet: payload length, header length, the
// PacketHeaderProto, the chunk checksums and the data. cut >= 0 stops after
// that many data bytes (fault injection).
func writePacket(w io.Writer, offset, seq int64, last bool, data []byte, withSums bool, cut int64) error {
	nchunks := (len(data) + chunkSize - 1) / chunkSize
	var sums []byte
	if withSums {
		sums = make([]byte, 4*nchunks)
		for i := 0; i < nchunks; i++ {
			chunk := data[i*chunkSize : min(len(data), (i+1)*chunkSize)]
			binary.BigEndian.PutUint32(sums[4*i:], crc32.Checksum(chunk, castagnoli))
		}
	}
	h, err := proto.Marshal(&pb.PacketHeaderProto{
		OffsetInBlock:     proto.Int64(offset),
		Seqno:             proto.Int64(seq),
		LastPacketInBlock: proto.Bool(last),
		DataLen:           proto.Int32(int32(len(data))),
	})
	if err != nil {
		return err
	}
	var lens [6]byte
	binary.BigEndian.PutUint32(lens[:4], uint32(4+len(sums)+len(data)))
	binary.BigEndian.PutUint16(lens[4:], uint16(len(h)))
	for _, part := range [][]byte{lens[:], h, sums} {
		if _, err := w.Write(part); err != nil {
			return err
		}
	}
	if cut >= 0 {
		data = data[:cut]
	}
	_, err = w.Write(data)
	return err
}

// writeBlock receives the packets of one block, checks their checksums,
// writes them into the file at the block's range and acknowledges each.
func (s *Server) writeBlock(w *throttledConn, r *bufio.Reader, req *pb.OpWriteBlockProto) error {
	b := req.GetHeader().GetBaseHeader().GetBlock()
	ref, hp, err := s.blockTarget(b.GetBlockId(), true)
	s.sleep(s.opt.Faults.TTFB)
	if err != nil {
		return opError(w, pb.Status_ERROR, err.Error())
	}
	if len(req.GetTargets()) > 0 {
		return opError(w, pb.Status_ERROR, "hdfsemu has a single datanode: pipelines of more than one node are not emulated")
	}
	if s.chance(s.opt.Faults.ErrorRate) {
		return opError(w, pb.Status_ERROR, "injected fault: datanode error")
	}
	bpc := int(req.GetRequestedChecksum().GetBytesPerChecksum())
	ctype := req.GetRequestedChecksum().GetType()
	if bpc <= 0 || (ctype != pb.ChecksumTypeProto_CHECKSUM_CRC32C && ctype != pb.ChecksumTypeProto_CHECKSUM_NULL && ctype != pb.ChecksumTypeProto_CHECKSUM_CRC32) {
		return opError(w, pb.Status_ERROR_INVALID, "unsupported checksum")
	}
	table := castagnoli
	if ctype == pb.ChecksumTypeProto_CHECKSUM_CRC32 {
		table = crc32.IEEETable
	}
	f, err := os.OpenFile(hp, os.O_WRONLY, 0)
	if err != nil {
		return opError(w, pb.Status_ERROR, err.Error())
	}
	defer f.Close()
	// firstBadLink is always sent (empty): it also keeps the response at
	// least 5 bytes long, which the Go client's reader assumes.
	if err := writeDelimited(w, &pb.BlockOpResponseProto{Status: pb.Status_SUCCESS.Enum(), FirstBadLink: proto.String("")}); err != nil {
		return err
	}
	dropAfter := int64(-1)
	if s.chance(s.opt.Faults.DropRate) {
		dropAfter = s.randInt63n(max(ref.size/packetData, 1))
	}
	ack := func(seq int64, st pb.Status) error {
		return writeDelimited(w, &pb.PipelineAckProto{Seqno: proto.Int64(seq), Reply: []pb.Status{st}})
	}
	for npk := int64(0); ; npk++ {
		w.SetDeadline(time.Now().Add(idleTimeout))
		var lens [6]byte
		if _, err := io.ReadFull(r, lens[:]); err != nil {
			return err
		}
		plen := binary.BigEndian.Uint32(lens[:4])
		hlen := binary.BigEndian.Uint16(lens[4:])
		if plen < 4 || plen > maxPacket {
			return fmt.Errorf("bad packet length %d", plen)
		}
		hb := make([]byte, hlen)
		if _, err := io.ReadFull(r, hb); err != nil {
			return err
		}
		h := &pb.PacketHeaderProto{}
		if err := proto.Unmarshal(hb, h); err != nil {
			return err
		}
		body := make([]byte, plen-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		if h.GetSeqno() == heartbeatSeqno {
			if err := ack(heartbeatSeqno, pb.Status_SUCCESS); err != nil {
				return err
			}
			continue
		}
		if npk == dropAfter {
			return errInjectedDrop
		}
		dlen := int(h.GetDataLen())
		if dlen < 0 || dlen > len(body) {
			return fmt.Errorf("bad packet data length %d", dlen)
		}
		sums, data := body[:len(body)-dlen], body[len(body)-dlen:]
		if ctype != pb.ChecksumTypeProto_CHECKSUM_NULL {
			n := (dlen + bpc - 1) / bpc
			ok := len(sums) == 4*n
			for i := 0; ok && i < n; i++ {
				chunk := data[i*bpc : min(dlen, (i+1)*bpc)]
				ok = crc32.Checksum(chunk, table) == binary.BigEndian.Uint32(sums[4*i:])
			}
			if !ok {
				ack(h.GetSeqno(), pb.Status_ERROR_CHECKSUM)
				return fmt.Errorf("checksum error in block %d at offset %d", b.GetBlockId(), h.GetOffsetInBlock())
			}
		}
		off := h.GetOffsetInBlock()
		if off < 0 || off+int64(dlen) > ref.size {
			ack(h.GetSeqno(), pb.Status_ERROR_INVALID)
			return fmt.Errorf("packet [%d,+%d) outside block of %d bytes", off, dlen, ref.size)
		}
		if dlen > 0 {
			if _, err := f.WriteAt(data, ref.start+off); err != nil {
				ack(h.GetSeqno(), pb.Status_ERROR)
				return err
			}
		}
		if err := ack(h.GetSeqno(), pb.Status_SUCCESS); err != nil {
			return err
		}
		if h.GetLastPacketInBlock() {
			return nil
		}
	}
}

// throttledConn paces a connection to bw bytes per second in each
// direction (0 = unlimited).
type throttledConn struct {
	net.Conn
	bw            int64
	start         time.Time
	read, written int64
}

func (c *throttledConn) pace(total int64) {
	if c.bw <= 0 {
		return
	}
	due := c.start.Add(time.Duration(float64(total) / float64(c.bw) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
}

func (c *throttledConn) Read(p []byte) (int, error) {
	if c.bw > 0 && int64(len(p)) > c.bw/10+1 {
		p = p[:c.bw/10+1] // keep bursts short (100 ms worth)
	}
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	c.pace(c.read)
	return n, err
}

func (c *throttledConn) Write(p []byte) (int, error) {
	var done int
	for len(p) > 0 {
		k := len(p)
		if c.bw > 0 && int64(k) > c.bw/10+1 {
			k = int(c.bw/10 + 1)
		}
		n, err := c.Conn.Write(p[:k])
		done += n
		c.written += int64(n)
		if err != nil {
			return done, err
		}
		c.pace(c.written)
		p = p[k:]
	}
	return done, nil
}
