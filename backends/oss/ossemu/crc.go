package ossemu

import "hash/crc64"

// crc64Combine returns the CRC-64/ECMA of A followed by B from the CRCs of
// each and B's length, as OSS combines the CRCs of a multipart object's
// parts: zlib's crc32_combine, 64 bits wide. Completing an upload then
// copies the parts without reading them through a hash.
func crc64Combine(crcA, crcB uint64, lenB int64) uint64 {
	if lenB <= 0 {
		return crcA
	}
	// odd: the operator of one zero bit; squared, of 2, 4, ... zero bits.
	var even, odd [64]uint64
	odd[0] = crc64.ECMA
	row := uint64(1)
	for n := 1; n < 64; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // 2 zero bits
	gf2Square(&odd, &even) // 4 zero bits
	for {
		gf2Square(&even, &odd) // 8, 32, ... zero bits: a byte, 4 bytes, ...
		if lenB&1 != 0 {
			crcA = gf2Times(&even, crcA)
		}
		if lenB >>= 1; lenB == 0 {
			break
		}
		gf2Square(&odd, &even)
		if lenB&1 != 0 {
			crcA = gf2Times(&odd, crcA)
		}
		if lenB >>= 1; lenB == 0 {
			break
		}
	}
	return crcA ^ crcB
}

func gf2Times(mat *[64]uint64, vec uint64) uint64 {
	var sum uint64
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[64]uint64) {
	for n := range mat {
		square[n] = gf2Times(mat, mat[n])
	}
}
