package hdfsemu_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	common "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_common"
	pb "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_hdfs"
)

// These tests speak the wire protocols by hand, to pin down what the
// emulator sends independently of the client library.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func delimited(t *testing.T, msgs ...proto.Message) []byte {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		b = binary.AppendUvarint(b, uint64(len(data)))
		b = append(b, data...)
	}
	return b
}

// rpcConn is a minimal Hadoop RPC client.
type rpcConn struct {
	t    *testing.T
	c    net.Conn
	r    *bufio.Reader
	call int32
}

func dialRPC(t *testing.T, addr, user string) *rpcConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	hdr := &common.RpcRequestHeaderProto{CallId: proto.Int32(-3), ClientId: []byte("0123456789abcdef")}
	ctx := &common.IpcConnectionContextProto{UserInfo: &common.UserInformationProto{EffectiveUser: proto.String(user)}, Protocol: proto.String("org.apache.hadoop.hdfs.protocol.ClientProtocol")}
	body := delimited(t, hdr, ctx)
	pre := append([]byte("hrpc\x09\x00\x00"), binary.BigEndian.AppendUint32(nil, uint32(len(body)))...)
	if _, err := c.Write(append(pre, body...)); err != nil {
		t.Fatal(err)
	}
	return &rpcConn{t: t, c: c, r: bufio.NewReader(c)}
}

// do runs one call; it returns the response header (and fills resp on success).
func (rc *rpcConn) do(method string, req, resp proto.Message) *common.RpcResponseHeaderProto {
	rc.t.Helper()
	rc.call++
	body := delimited(rc.t,
		&common.RpcRequestHeaderProto{CallId: proto.Int32(rc.call), ClientId: []byte("0123456789abcdef")},
		&common.RequestHeaderProto{MethodName: proto.String(method), DeclaringClassProtocolName: proto.String("org.apache.hadoop.hdfs.protocol.ClientProtocol"), ClientProtocolVersion: proto.Uint64(1)},
		req)
	if _, err := rc.c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)); err != nil {
		rc.t.Fatal(err)
	}
	var n uint32
	if err := binary.Read(rc.r, binary.BigEndian, &n); err != nil {
		rc.t.Fatalf("%s: reading the answer: %v", method, err)
	}
	frame := make([]byte, n)
	io.ReadFull(rc.r, frame)
	h := &common.RpcResponseHeaderProto{}
	l, k := binary.Uvarint(frame)
	if err := proto.Unmarshal(frame[k:k+int(l)], h); err != nil {
		rc.t.Fatal(err)
	}
	if h.GetCallId() != uint32(rc.call) {
		rc.t.Fatalf("%s: answer to call %d, want %d", method, h.GetCallId(), rc.call)
	}
	rest := frame[k+int(l):]
	if h.GetStatus() == common.RpcResponseHeaderProto_SUCCESS {
		l, k := binary.Uvarint(rest)
		if err := proto.Unmarshal(rest[k:k+int(l)], resp); err != nil {
			rc.t.Fatal(err)
		}
	} else if len(rest) != 0 {
		rc.t.Fatalf("%s: an error answer carries a body", method)
	}
	return h
}

func readVarintMsg(t *testing.T, r *bufio.Reader, m proto.Message) {
	t.Helper()
	n, err := binary.ReadUvarint(r)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
}

type packet struct {
	h    *pb.PacketHeaderProto
	sums []byte
	data []byte
}

func readPacket(r io.Reader) (packet, error) {
	var lens [6]byte
	if _, err := io.ReadFull(r, lens[:]); err != nil {
		return packet{}, err
	}
	plen, hlen := binary.BigEndian.Uint32(lens[:4]), binary.BigEndian.Uint16(lens[4:])
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return packet{}, err
	}
	p := packet{h: &pb.PacketHeaderProto{}}
	if err := proto.Unmarshal(hb, p.h); err != nil {
		return packet{}, err
	}
	body := make([]byte, plen-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return packet{}, err
	}
	d := int(p.h.GetDataLen())
	p.sums, p.data = body[:len(body)-d], body[len(body)-d:]
	return p, nil
}

func readBlockConn(t *testing.T, s *hdfsemu.Server, b *pb.LocatedBlockProto, off, n uint64) (*bufio.Reader, *pb.BlockOpResponseProto) {
	t.Helper()
	c, err := net.Dial("tcp", s.DataNodeAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	op := &pb.OpReadBlockProto{
		Header: &pb.ClientOperationHeaderProto{BaseHeader: &pb.BaseHeaderProto{Block: b.GetB()}, ClientName: proto.String("wire-test")},
		Offset: proto.Uint64(off), Len: proto.Uint64(n),
	}
	c.Write(append([]byte{0, 28, 81}, delimited(t, op)...))
	r := bufio.NewReader(c)
	resp := &pb.BlockOpResponseProto{}
	readVarintMsg(t, r, resp)
	return r, resp
}

// TestWireReadBlock: block locations cut a file at the block size, and a
// READ_BLOCK from mid-chunk starts at the chunk boundary, sends 512-byte
// chunks with correct CRC32C sums and offsets, and ends with an empty last
// packet.
func TestWireReadBlock(t *testing.T) {
	root := t.TempDir()
	data := randBytes(5, 3*testBlockSize-100)
	os.WriteFile(filepath.Join(root, "f"), data, 0o644)
	s, _ := start(t, hdfsemu.Options{Root: root})
	rc := dialRPC(t, s.Addr(), "root")
	locs := &pb.GetBlockLocationsResponseProto{}
	if h := rc.do("getBlockLocations", &pb.GetBlockLocationsRequestProto{Src: proto.String("/f"), Offset: proto.Uint64(0), Length: proto.Uint64(uint64(len(data)))}, locs); h.GetStatus() != common.RpcResponseHeaderProto_SUCCESS {
		t.Fatalf("getBlockLocations: %v", h)
	}
	blocks := locs.GetLocations().GetBlocks()
	if len(blocks) != 3 || locs.GetLocations().GetFileLength() != uint64(len(data)) {
		t.Fatalf("%d blocks, length %d", len(blocks), locs.GetLocations().GetFileLength())
	}
	for i, b := range blocks {
		wantLen := min(testBlockSize, len(data)-i*testBlockSize)
		if b.GetOffset() != uint64(i*testBlockSize) || b.GetB().GetNumBytes() != uint64(wantLen) || len(b.GetLocs()) != 1 {
			t.Fatalf("block %d: offset %d, %d bytes, %d locations", i, b.GetOffset(), b.GetB().GetNumBytes(), len(b.GetLocs()))
		}
	}
	r, resp := readBlockConn(t, s, blocks[1], 700, 1000)
	if resp.GetStatus() != pb.Status_SUCCESS || resp.GetReadOpChecksumInfo().GetChunkOffset() != 512 ||
		resp.GetReadOpChecksumInfo().GetChecksum().GetType() != pb.ChecksumTypeProto_CHECKSUM_CRC32C ||
		resp.GetReadOpChecksumInfo().GetChecksum().GetBytesPerChecksum() != 512 {
		t.Fatalf("read response %v", resp)
	}
	var got []byte
	next := int64(512)
	for {
		p, err := readPacket(r)
		if err != nil {
			t.Fatal(err)
		}
		if p.h.GetOffsetInBlock() != next {
			t.Fatalf("packet at offset %d, want %d", p.h.GetOffsetInBlock(), next)
		}
		for i := 0; i*512 < len(p.data); i++ {
			chunk := p.data[i*512 : min(len(p.data), (i+1)*512)]
			if crc32.Checksum(chunk, castagnoli) != binary.BigEndian.Uint32(p.sums[4*i:]) {
				t.Fatalf("bad checksum for chunk %d of packet at %d", i, next)
			}
		}
		got = append(got, p.data...)
		next += int64(len(p.data))
		if p.h.GetLastPacketInBlock() {
			if len(p.data) != 0 {
				t.Fatal("last packet carries data")
			}
			break
		}
	}
	base := testBlockSize
	if want := data[base+512 : base+1700]; !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes from 512, want bytes [512,1700) of block 1", len(got))
	}
}

// TestWireDropMidBlock: with DropRate 1 the DataNode hangs up before the
// last packet.
func TestWireDropMidBlock(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), randBytes(6, testBlockSize), 0o644)
	s, _ := start(t, hdfsemu.Options{Root: root, Faults: hdfsemu.Faults{DropRate: 1}})
	rc := dialRPC(t, s.Addr(), "root")
	locs := &pb.GetBlockLocationsResponseProto{}
	rc.do("getBlockLocations", &pb.GetBlockLocationsRequestProto{Src: proto.String("/f"), Offset: proto.Uint64(0), Length: proto.Uint64(testBlockSize)}, locs)
	r, resp := readBlockConn(t, s, locs.GetLocations().GetBlocks()[0], 0, testBlockSize)
	if resp.GetStatus() != pb.Status_SUCCESS {
		t.Fatalf("status %v", resp.GetStatus())
	}
	var total int
	for {
		p, err := readPacket(r)
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("want the connection cut, got %v", err)
			}
			break
		}
		if p.h.GetLastPacketInBlock() {
			t.Fatal("the whole block arrived despite DropRate 1")
		}
		total += len(p.data)
	}
	if total >= testBlockSize {
		t.Fatalf("%d bytes arrived", total)
	}
}

// TestWireWriteBlockChecksum: a packet whose CRC32C does not match is
// refused with ERROR_CHECKSUM in its ack, and its data is not written.
func TestWireWriteBlockChecksum(t *testing.T) {
	s, root := start(t, hdfsemu.Options{})
	rc := dialRPC(t, s.Addr(), "root")
	cr := &pb.CreateResponseProto{}
	if h := rc.do("create", &pb.CreateRequestProto{
		Src: proto.String("/w"), Masked: &pb.FsPermissionProto{Perm: proto.Uint32(0o644)}, ClientName: proto.String("wire"),
		CreateFlag: proto.Uint32(1), CreateParent: proto.Bool(false), Replication: proto.Uint32(1), BlockSize: proto.Uint64(testBlockSize),
	}, cr); h.GetStatus() != common.RpcResponseHeaderProto_SUCCESS {
		t.Fatalf("create: %v", h)
	}
	ab := &pb.AddBlockResponseProto{}
	if h := rc.do("addBlock", &pb.AddBlockRequestProto{Src: proto.String("/w"), ClientName: proto.String("wire"), FileId: cr.GetFs().FileId}, ab); h.GetStatus() != common.RpcResponseHeaderProto_SUCCESS {
		t.Fatalf("addBlock: %v", h)
	}
	c, err := net.Dial("tcp", s.DataNodeAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	op := &pb.OpWriteBlockProto{
		Header:       &pb.ClientOperationHeaderProto{BaseHeader: &pb.BaseHeaderProto{Block: ab.GetBlock().GetB()}, ClientName: proto.String("wire")},
		Stage:        pb.OpWriteBlockProto_PIPELINE_SETUP_CREATE.Enum(),
		PipelineSize: proto.Uint32(0), MinBytesRcvd: proto.Uint64(0), MaxBytesRcvd: proto.Uint64(0), LatestGenerationStamp: proto.Uint64(0),
		RequestedChecksum: &pb.ChecksumProto{Type: pb.ChecksumTypeProto_CHECKSUM_CRC32C.Enum(), BytesPerChecksum: proto.Uint32(512)},
	}
	c.Write(append([]byte{0, 28, 80}, delimited(t, op)...))
	r := bufio.NewReader(c)
	resp := &pb.BlockOpResponseProto{}
	readVarintMsg(t, r, resp)
	if resp.GetStatus() != pb.Status_SUCCESS {
		t.Fatalf("write op: %v", resp)
	}
	data := []byte(strings.Repeat("x", 600))
	sums := make([]byte, 8)
	binary.BigEndian.PutUint32(sums, crc32.Checksum(data[:512], castagnoli))
	binary.BigEndian.PutUint32(sums[4:], 12345) // wrong
	h, _ := proto.Marshal(&pb.PacketHeaderProto{OffsetInBlock: proto.Int64(0), Seqno: proto.Int64(1), LastPacketInBlock: proto.Bool(false), DataLen: proto.Int32(600)})
	pkt := binary.BigEndian.AppendUint32(nil, uint32(4+len(sums)+len(data)))
	pkt = binary.BigEndian.AppendUint16(pkt, uint16(len(h)))
	pkt = append(append(append(pkt, h...), sums...), data...)
	c.Write(pkt)
	ack := &pb.PipelineAckProto{}
	readVarintMsg(t, r, ack)
	if ack.GetSeqno() != 1 || len(ack.GetReply()) != 1 || ack.GetReply()[0] != pb.Status_ERROR_CHECKSUM {
		t.Fatalf("ack %v, want ERROR_CHECKSUM for seqno 1", ack)
	}
	if fi, err := os.Stat(filepath.Join(root, "w")); err != nil || fi.Size() != 0 {
		t.Fatalf("file after a refused packet: %v %v", fi, err)
	}
}

// TestWireUnknownMethod: a method the emulator lacks gets
// RpcNoSuchMethodException, and the connection stays usable.
func TestWireUnknownMethod(t *testing.T) {
	s, _ := start(t, hdfsemu.Options{})
	rc := dialRPC(t, s.Addr(), "root")
	h := rc.do("getSnapshottableDirListing", &pb.GetSnapshottableDirListingRequestProto{}, nil)
	if h.GetStatus() != common.RpcResponseHeaderProto_ERROR || !strings.HasSuffix(h.GetExceptionClassName(), "RpcNoSuchMethodException") {
		t.Fatalf("unknown method: %v", h)
	}
	fi := &pb.GetFileInfoResponseProto{}
	if h := rc.do("getFileInfo", &pb.GetFileInfoRequestProto{Src: proto.String("/")}, fi); h.GetStatus() != common.RpcResponseHeaderProto_SUCCESS || fi.GetFs().GetFileType() != pb.HdfsFileStatusProto_IS_DIR {
		t.Fatalf("getFileInfo after an error: %v %v", h, fi)
	}
}
