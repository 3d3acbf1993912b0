package sharedcache

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
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
// index, length), its CRC-32C, and a MAC under the key the cluster's
// nodes share (Options.Key) of all of it, so a block is served
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
	// Nonce is the block's random 96-bit GCM nonce and MAC its 128-bit
	// tag (macKey.sum), both hex.
	Nonce string `json:"nonce"`
	MAC   string `json:"mac"`

	// need is the least data length the reader accepts: a whole block,
	// or up to the end of the range it reads when that ends in the
	// block (the node cache reads no further than an object's size, so
	// a shorter block is not the one that object's version has). Not
	// stored.
	need int64
}

// macKey computes and checks the blocks' MACs: AES-256-GCM used as a MAC
// (GMAC), under a key derived from the cluster's by HMAC-SHA256, with a
// random nonce per block. GCM's tag runs at 5-8 GB/s on this kind of CPU
// (AES-NI, PCLMULQDQ), HMAC-SHA256 at 0.5-1.1 (SHA-NI): with HMAC a node
// read its tier at a third of the speed. Random 96-bit nonces keep a
// collision (which would let a forger learn GCM's hash key) unlikely up to
// 2^32 blocks written under one key, 4 PiB of 1 MiB blocks; rotate the key
// well before.
type macKey struct{ aead cipher.AEAD }

// newMACKey derives the GCM key from the cluster's key (of any length).
func newMACKey(key []byte) macKey {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("mlfsd shared cache block MAC, AES-256-GCM"))
	c, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(c)
	if err != nil {
		panic(err)
	}
	return macKey{aead}
}

// sum is the tag of what a block is and holds: the format, its source
// identity, key and version, its index and offset (block size and index:
// nodes with other block sizes never share one), its length, and its
// data. The fields are sealed as the (length-prefixed, so unambiguous)
// plaintext and the data as the additional data, so the data is never
// copied; the tag covers both.
func (k macKey) sum(nonce []byte, h header, blockSize int64, data []byte) []byte {
	var fields []byte
	for _, s := range []string{magic, h.Source, h.Key, h.Version} {
		fields = binary.BigEndian.AppendUint64(fields, uint64(len(s)))
		fields = append(fields, s...)
	}
	fields = binary.BigEndian.AppendUint64(fields, uint64(h.Block))
	fields = binary.BigEndian.AppendUint64(fields, uint64(h.Block*blockSize))
	fields = binary.BigEndian.AppendUint64(fields, uint64(len(data)))
	sealed := k.aead.Seal(nil, nonce, fields, data)
	return sealed[len(fields):]
}

// verify reports whether h's MAC is data's under k.
func (k macKey) verify(h header, blockSize int64, data []byte) bool {
	nonce, err := hex.DecodeString(h.Nonce)
	if err != nil || len(nonce) != k.aead.NonceSize() {
		return false
	}
	mac, err := hex.DecodeString(h.MAC)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare(mac, k.sum(nonce, h, blockSize, data)) == 1
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
func encodeHeader(key macKey, blockSize int64, h header, data []byte) []byte {
	h.Len = int64(len(data))
	h.CRC32C = crc32.Checksum(data, castagnoli)
	nonce := make([]byte, key.aead.NonceSize())
	rand.Read(nonce) // never fails (crypto/rand)
	h.Nonce = hex.EncodeToString(nonce)
	h.MAC = hex.EncodeToString(key.sum(nonce, h, blockSize, data))
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
