package parlist

import (
	"slices"
	"unicode/utf8"
)

// scale estimates how many entries lie between two keys, from the density
// of one page: a key maps to a number in [0, 1), its runes from a common
// prefix on read as digits of a base of the page's alphabet (a rune
// between two seen ones counts halfway). For sequential names the estimate
// is close (img_002 to img_003 is one page when img_000000 to img_000999
// was); for others it is a guess that only steers how finely to split and
// when to probe, never what is listed.
type scale struct {
	from int // byte offset where every measured key's digits start
	// alphabets[i] holds the runes seen at rune i after from in the
	// page's keys, or all the page's runes where just one was seen there:
	// digit i is in base len(alphabets[i])+1 (0 ends the key).
	alphabets [][]rune
	perUnit   float64 // entries per unit of position
}

// maxDigits bounds the runes read per key: enough to place a key within
// a page of a directory of billions.
const maxDigits = 10

// newScale measures the page's keys (sorted, at least two apart) so that
// keys sharing their first from bytes with them can be compared; others
// lists every other key that will be measured.
func newScale(keys []string, alphabet []rune, others ...string) (scale, bool) {
	if len(keys) < 2 || len(alphabet) == 0 {
		return scale{}, false
	}
	from := commonPrefix(keys[0], keys[len(keys)-1])
	for _, o := range others {
		if o != "" {
			from = min(from, commonPrefix(keys[0], o))
		}
	}
	for from > 0 && from < len(keys[0]) && !utf8.RuneStart(keys[0][from]) {
		from--
	}
	seen := make([]map[rune]bool, maxDigits)
	for i := range seen {
		seen[i] = map[rune]bool{}
	}
	for _, k := range keys {
		rest := k[min(from, len(k)):]
		for i := 0; i < maxDigits && rest != ""; i++ {
			r, w := utf8.DecodeRuneInString(rest)
			rest = rest[w:]
			seen[i][r] = true
		}
	}
	s := scale{from: from, alphabets: make([][]rune, maxDigits)}
	for i, m := range seen {
		if len(m) < 2 {
			s.alphabets[i] = alphabet
			continue
		}
		for r := range m {
			s.alphabets[i] = append(s.alphabets[i], r)
		}
		slices.Sort(s.alphabets[i])
	}
	span := s.pos(keys[len(keys)-1]) - s.pos(keys[0])
	if span <= 0 {
		return scale{}, false
	}
	s.perUnit = float64(len(keys)-1) / span
	return s, true
}

// pos maps key to [0, 1); "" (no bound) is 1.
func (s scale) pos(key string) float64 {
	if key == "" {
		return 1
	}
	v, unit := 0.0, 1.0
	rest := key[min(s.from, len(key)):]
	for i := 0; i < maxDigits && rest != ""; i++ {
		r, w := utf8.DecodeRuneInString(rest)
		rest = rest[w:]
		a := s.alphabets[i]
		d, found := slices.BinarySearch(a, r)
		digit := float64(d) + 1
		if !found {
			digit -= 0.5
		}
		unit /= float64(len(a) + 1)
		v += digit * unit
	}
	return v
}

// entries estimates the entries after a up to b ("": no bound).
func (s scale) entries(a, b string) float64 {
	return (s.pos(b) - s.pos(a)) * s.perUnit
}
