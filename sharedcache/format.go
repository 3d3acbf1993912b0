package sharedcache

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

// A block in the tier is one object:
//
//	magic (8 bytes) | header length (uint32, big endian) | header (JSON) | data
//
// The header names what the data is (source identity, key, version, block
// index, length), its CRC-32C, and an HMAC-SHA256 under the key the
// cluster's nodes share (Options.Key) of all of it, so a block is served
// only when every one of those matches what the reader asked for: a
// truncated upload, a flipped bit, or an object written under the wrong
// name (a bug, a collision, an operator's copy) is a miss, never wrong
// bytes; and so is a block written by anyone without the key (a pod that
// can write to the tier's store, a node of another cluster), however well
// formed its header and CRC.

// magic starts every block object; the digit is the format version
// (version 1 had no MAC: its blocks are misses, overwritten as read).
const magic = "MLFSSC2\n"

// maxHeader bounds the header a reader accepts (keys are at most 1 KiB on
// OSS; source identities are URIs).
const maxHeader = 64 << 10

// blocksPrefix holds every block object; the lease lives beside it.
const blocksPrefix = "blocks/"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header describes one block.
type header struct {
	Source  string `json:"source"`
	Key     string `json:"key"`
	Version string `json:"version"`
	Block   int64  `json:"block"`
	Len     int64  `json:"len"`
	CRC32C  uint32 `json:"crc32c"`
	// MAC is the hex HMAC-SHA256 of the block (blockMAC).
	MAC string `json:"mac"`

	// need is the least data length the reader accepts: a whole block,
	// or up to the end of the range it reads when that ends in the
	// block (the node cache reads no further than an object's size, so
	// a shorter block is not the one that object's version has). Not
	// stored.
	need int64
}

// blockMAC is the HMAC-SHA256 under key of what a block is and holds: the
// format, its source identity, key and version, its index and offset
// (block size and index: nodes with other block sizes never share one),
// its length, and its data. Every field is length-prefixed, so no two
// blocks encode alike.
func blockMAC(key []byte, h header, blockSize int64, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	var n [8]byte
	put := func(v uint64) {
		binary.BigEndian.PutUint64(n[:], v)
		m.Write(n[:])
	}
	for _, s := range []string{magic, h.Source, h.Key, h.Version} {
		put(uint64(len(s)))
		m.Write([]byte(s))
	}
	put(uint64(h.Block))
	put(uint64(h.Block * blockSize))
	put(uint64(len(data)))
	m.Write(data)
	return m.Sum(nil)
}

// blockName is the tier key of a block: a hash of (source identity, key,
// version), so any key of any store maps to a short, safe name, spread
// over 256 directories, and the block index.
func blockName(source, key, version string, block int64) string {
	h := sha256.New()
	for _, s := range []string{source, key, version} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	sum := hex.EncodeToString(h.Sum(nil))
	return blocksPrefix + sum[:2] + "/" + sum + "." + strconv.FormatInt(block, 10)
}

// encodeHeader returns what precedes data in its block object, with its
// MAC under key.
func encodeHeader(key []byte, blockSize int64, h header, data []byte) []byte {
	h.Len = int64(len(data))
	h.CRC32C = crc32.Checksum(data, castagnoli)
	h.MAC = hex.EncodeToString(blockMAC(key, h, blockSize, data))
	hj, err := json.Marshal(h)
	if err != nil {
		panic(err) // strings and integers always marshal
	}
	out := make([]byte, 0, len(magic)+4+len(hj))
	out = append(out, magic...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(hj)))
	return append(out, hj...)
}

// errCorrupt marks a block object that is not the block asked for.
var errCorrupt = errors.New("shared cache block corrupt")

// checkHeader decodes a block's header and checks it names want (all but
// Len and CRC32C, which it returns for the data's checks).
func checkHeader(hj []byte, want header) (header, error) {
	var h header
	if err := json.Unmarshal(hj, &h); err != nil {
		return h, fmt.Errorf("%w: header: %v", errCorrupt, err)
	}
	if h.Source != want.Source || h.Key != want.Key || h.Version != want.Version || h.Block != want.Block {
		return h, fmt.Errorf("%w: holds %s %q version %q block %d", errCorrupt, h.Source, h.Key, h.Version, h.Block)
	}
	return h, nil
}

// errUnauthenticated marks a corrupt block whose MAC does not verify.
var errUnauthenticated = errors.New("MAC does not verify (not written under this cluster's key)")
