package hdfsemu_test

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	common "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_common"
	pb "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_hdfs"
)

// hadoopBlockMD5 is the block checksum a Hadoop DataNode returns for a
// replicated block: the MD5 of the block's .meta checksum region, one
// big-endian CRC32C per 512-byte chunk (BlockChecksumHelper.
// ReplicatedBlockChecksumComputer, bytesPerCRC = dfs.bytes-per-checksum).
func hadoopBlockMD5(block []byte) []byte {
	h := md5.New()
	for off := 0; off < len(block); off += 512 {
		var c [4]byte
		binary.BigEndian.PutUint32(c[:], crc32.Checksum(block[off:min(off+512, len(block))], crc32.MakeTable(crc32.Castagnoli)))
		h.Write(c[:])
	}
	return h.Sum(nil)
}

// hadoopFileMD5 is MD5MD5CRC32CastagnoliFileChecksum's MD5 as
// FileChecksumHelper computes it: each block MD5 is written to a
// DataOutputBuffer (a 32-byte array that doubles when full) and the file
// MD5 is MD5Hash.digest(md5out.getData()), the whole backing array, zero
// padding included. An empty file has no blocks: MD5 of 32 zero bytes.
func hadoopFileMD5(data []byte, blockSize int) []byte {
	var buf []byte
	for off := 0; off < len(data); off += blockSize {
		buf = append(buf, hadoopBlockMD5(data[off:min(off+blockSize, len(data))])...)
	}
	capacity := 32
	for capacity < len(buf) {
		capacity *= 2
	}
	sum := md5.Sum(append(buf, make([]byte, capacity-len(buf))...))
	return sum[:]
}

// TestFileChecksumMatchesHadoop: the unmodified client's Checksum (what
// `hdfs checksum` prints) equals the MD5-of-MD5-of-CRC32C value computed
// here from the data, for files of 0, 1, 2 and 3 blocks (partial last
// chunk and block), so files with different contents differ.
func TestFileChecksumMatchesHadoop(t *testing.T) {
	root := t.TempDir()
	files := map[string][]byte{
		"empty": nil,
		"small": []byte("hello, hdfs\n"),
		"one":   randBytes(7, testBlockSize),
		"three": randBytes(8, 2*testBlockSize+1000),
		"many":  randBytes(9, 9*testBlockSize+3),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := start(t, hdfsemu.Options{Root: root})
	c := client(t, s, "alice")
	seen := map[string]string{}
	for name, data := range files {
		f, err := c.Open("/" + name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Checksum()
		f.Close()
		if err != nil {
			t.Fatalf("%s: checksum: %v", name, err)
		}
		want := hadoopFileMD5(data, testBlockSize)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: checksum %x, want %x", name, got, want)
		}
		if other, dup := seen[hex.EncodeToString(got)]; dup {
			t.Fatalf("%s and %s have the same checksum %x", name, other, got)
		}
		seen[hex.EncodeToString(got)] = name
	}
	// The published value for an empty file (no blocks): MD5 of 32 zeros.
	if got := hex.EncodeToString(hadoopFileMD5(nil, testBlockSize)); got != "70bc8f4b72a86921468bf8e8441dce51" {
		t.Fatalf("reference checksum of an empty file = %s", got)
	}
}

// blockChecksumOp sends OP_BLOCK_CHECKSUM (0x55) for b by hand.
func blockChecksumOp(t *testing.T, s *hdfsemu.Server, b *pb.LocatedBlockProto, opts *pb.BlockChecksumOptionsProto) *pb.BlockOpResponseProto {
	t.Helper()
	c, err := net.Dial("tcp", s.DataNodeAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	op := &pb.OpBlockChecksumProto{Header: &pb.BaseHeaderProto{Block: b.GetB()}, BlockChecksumOptions: opts}
	if _, err := c.Write(append([]byte{0, 28, 0x55}, delimited(t, op)...)); err != nil {
		t.Fatal(err)
	}
	resp := &pb.BlockOpResponseProto{}
	readVarintMsg(t, bufio.NewReader(c), resp)
	return resp
}

// TestWireBlockChecksum pins the DataNode's reply fields as Hadoop sends
// them: bytesPerCrc 512, crcPerBlock = chunks in the block, crcType
// CRC32C, the MD5 of the chunk CRCs; and for COMPOSITE_CRC the CRC32C of
// the block (or of each stripe).
func TestWireBlockChecksum(t *testing.T) {
	root := t.TempDir()
	data := randBytes(11, 2*testBlockSize-300)
	os.WriteFile(filepath.Join(root, "f"), data, 0o644)
	s, _ := start(t, hdfsemu.Options{Root: root})
	rc := dialRPC(t, s.Addr(), "root")
	locs := &pb.GetBlockLocationsResponseProto{}
	if h := rc.do("getBlockLocations", &pb.GetBlockLocationsRequestProto{Src: proto.String("/f"), Offset: proto.Uint64(0), Length: proto.Uint64(uint64(len(data)))}, locs); h.GetStatus() != common.RpcResponseHeaderProto_SUCCESS {
		t.Fatalf("getBlockLocations: %v", h)
	}
	blocks := locs.GetLocations().GetBlocks()
	if len(blocks) != 2 {
		t.Fatalf("%d blocks, want 2", len(blocks))
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for i, b := range blocks {
		blk := data[i*testBlockSize : min((i+1)*testBlockSize, len(data))]
		resp := blockChecksumOp(t, s, b, nil)
		cr := resp.GetChecksumResponse()
		if resp.GetStatus() != pb.Status_SUCCESS || cr.GetBytesPerCrc() != 512 || cr.GetCrcPerBlock() != uint64((len(blk)+511)/512) ||
			cr.GetCrcType() != pb.ChecksumTypeProto_CHECKSUM_CRC32C || cr.GetBlockChecksumOptions().GetBlockChecksumType() != pb.BlockChecksumTypeProto_MD5CRC {
			t.Fatalf("block %d: reply %v", i, resp)
		}
		if !bytes.Equal(cr.GetBlockChecksum(), hadoopBlockMD5(blk)) {
			t.Fatalf("block %d: MD5 %x, want %x", i, cr.GetBlockChecksum(), hadoopBlockMD5(blk))
		}

		resp = blockChecksumOp(t, s, b, &pb.BlockChecksumOptionsProto{BlockChecksumType: pb.BlockChecksumTypeProto_COMPOSITE_CRC.Enum()})
		want := binary.BigEndian.AppendUint32(nil, crc32.Checksum(blk, castagnoli))
		if got := resp.GetChecksumResponse().GetBlockChecksum(); resp.GetStatus() != pb.Status_SUCCESS || !bytes.Equal(got, want) ||
			resp.GetChecksumResponse().GetBlockChecksumOptions().GetBlockChecksumType() != pb.BlockChecksumTypeProto_COMPOSITE_CRC {
			t.Fatalf("block %d: composite reply %v, want CRC %x", i, resp, want)
		}
	}
	// Striped composite CRC: one CRC per 1000 bytes of the first block.
	resp := blockChecksumOp(t, s, blocks[0], &pb.BlockChecksumOptionsProto{BlockChecksumType: pb.BlockChecksumTypeProto_COMPOSITE_CRC.Enum(), StripeLength: proto.Uint64(1000)})
	var want []byte
	for off := 0; off < testBlockSize; off += 1000 {
		want = binary.BigEndian.AppendUint32(want, crc32.Checksum(data[off:min(off+1000, testBlockSize)], castagnoli))
	}
	if got := resp.GetChecksumResponse().GetBlockChecksum(); !bytes.Equal(got, want) {
		t.Fatalf("striped composite CRC %x, want %x", got, want)
	}
}
