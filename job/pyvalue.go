package job

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The SageMaker training toolkit reads every hyperparameter with Python's
// json.loads, falling back to the string itself (environment.py,
// read_hyperparameters), and writes the SM_* variables with json.dumps and
// str(). This file reproduces exactly those Python operations on the values
// JSON can produce, so SM_* match the toolkit byte for byte.

// A pyValue is one of: nil (None), bool, pyInt, float64, string, pyList, *pyDict.
type pyValue any

// pyInt is a Python int, as its canonical decimal text (Python ints have no
// size limit, so it is kept as text).
type pyInt string

type pyList []pyValue

// pyDict is a Python dict: insertion order, a repeated key keeps its first
// position and takes the last value.
type pyDict struct {
	keys []string
	vals map[string]pyValue
}

func newPyDict() *pyDict { return &pyDict{vals: map[string]pyValue{}} }

func (d *pyDict) set(k string, v pyValue) {
	if _, ok := d.vals[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.vals[k] = v
}

func (d *pyDict) get(k string) (pyValue, bool) {
	v, ok := d.vals[k]
	return v, ok
}

// pyMaxIntDigits is Python's default int_max_str_digits (3.11+, and the
// 3.7-3.10 security releases): a longer integer literal makes json.loads
// raise ValueError, so the toolkit keeps the text as a string.
const pyMaxIntDigits = 4300

// pyLoadsOrString is the toolkit's typing of one hyperparameter value:
// json.loads(s), or s itself when that raises.
func pyLoadsOrString(s string) pyValue {
	if v, ok := pyJSONLoads(s); ok {
		return v
	}
	return s
}

// pyJSONLoads is Python's json.loads on a str (C scanner, strict mode).
func pyJSONLoads(s string) (pyValue, bool) {
	d := pyDecoder{s: s}
	d.ws()
	v, ok := d.value()
	if !ok {
		return nil, false
	}
	d.ws()
	return v, d.i == len(s)
}

type pyDecoder struct {
	s string
	i int
}

// ws skips json's WHITESPACE: [ \t\n\r]*.
func (d *pyDecoder) ws() {
	for d.i < len(d.s) && strings.IndexByte(" \t\n\r", d.s[d.i]) >= 0 {
		d.i++
	}
}

func (d *pyDecoder) lit(word string) bool {
	if strings.HasPrefix(d.s[d.i:], word) {
		d.i += len(word)
		return true
	}
	return false
}

func (d *pyDecoder) value() (pyValue, bool) {
	if d.i >= len(d.s) {
		return nil, false
	}
	switch c := d.s[d.i]; {
	case c == '"':
		return d.str()
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case d.lit("null"):
		return nil, true
	case d.lit("true"):
		return true, true
	case d.lit("false"):
		return false, true
	case d.lit("NaN"):
		return math.NaN(), true
	case d.lit("Infinity"):
		return math.Inf(1), true
	case d.lit("-Infinity"):
		return math.Inf(-1), true
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number follows the C scanner's _match_number_unicode: -?(0|[1-9]\d*),
// then a fraction and an exponent only when digits follow them.
func (d *pyDecoder) number() (pyValue, bool) {
	start := d.i
	if d.s[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.s) && d.s[d.i] == '0':
		d.i++
	case d.i < len(d.s) && d.s[d.i] >= '1' && d.s[d.i] <= '9':
		for d.i < len(d.s) && isDigit(d.s[d.i]) {
			d.i++
		}
	default:
		return nil, false
	}
	isFloat := false
	if d.i+1 < len(d.s) && d.s[d.i] == '.' && isDigit(d.s[d.i+1]) {
		isFloat = true
		d.i += 2
		for d.i < len(d.s) && isDigit(d.s[d.i]) {
			d.i++
		}
	}
	if d.i < len(d.s) && (d.s[d.i] == 'e' || d.s[d.i] == 'E') {
		j := d.i + 1
		if j < len(d.s) && (d.s[j] == '+' || d.s[j] == '-') {
			j++
		}
		if j < len(d.s) && isDigit(d.s[j]) {
			isFloat = true
			for j < len(d.s) && isDigit(d.s[j]) {
				j++
			}
			d.i = j
		}
	}
	text := d.s[start:d.i]
	if isFloat {
		// float() of an out-of-range literal is ±inf or ±0.0, never an error.
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !isRangeErr(err) {
			return nil, false
		}
		return f, true
	}
	digits := strings.TrimPrefix(text, "-")
	if len(digits) > pyMaxIntDigits {
		return nil, false
	}
	if digits == "0" {
		return pyInt("0"), true // int("-0") is 0
	}
	return pyInt(text), true
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func (d *pyDecoder) str() (pyValue, bool) {
	d.i++ // opening quote
	var b strings.Builder
	for d.i < len(d.s) {
		c := d.s[d.i]
		switch {
		case c == '"':
			d.i++
			return b.String(), true
		case c < 0x20:
			return nil, false // strict: no raw control characters
		case c != '\\':
			b.WriteByte(c)
			d.i++
			continue
		}
		d.i++
		if d.i >= len(d.s) {
			return nil, false
		}
		e := d.s[d.i]
		d.i++
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return nil, false
			}
			if r >= 0xd800 && r <= 0xdbff && strings.HasPrefix(d.s[d.i:], `\u`) {
				save := d.i
				d.i += 2
				if lo, ok := d.hex4(); ok && lo >= 0xdc00 && lo <= 0xdfff {
					r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
				} else {
					d.i = save
				}
			}
			if r >= 0xd800 && r <= 0xdfff {
				// Python keeps a lone surrogate; a Go string cannot
				// carry one (documented at Plan.sageMakerEnv).
				r = utf8.RuneError
			}
			b.WriteRune(r)
		default:
			return nil, false
		}
	}
	return nil, false
}

func (d *pyDecoder) hex4() (rune, bool) {
	if d.i+4 > len(d.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(d.s[d.i:d.i+4], 16, 32)
	if err != nil || strings.ContainsAny(d.s[d.i:d.i+4], "+-") {
		return 0, false
	}
	d.i += 4
	return rune(n), true
}

func (d *pyDecoder) object() (pyValue, bool) {
	d.i++
	m := newPyDict()
	d.ws()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return m, true
	}
	for {
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.ws()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return nil, false
		}
		d.i++
		d.ws()
		v, ok := d.value()
		if !ok {
			return nil, false
		}
		m.set(k.(string), v)
		d.ws()
		if d.i >= len(d.s) {
			return nil, false
		}
		switch d.s[d.i] {
		case '}':
			d.i++
			return m, true
		case ',':
			d.i++
			d.ws()
		default:
			return nil, false
		}
	}
}

func (d *pyDecoder) array() (pyValue, bool) {
	d.i++
	l := pyList{}
	d.ws()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return l, true
	}
	for {
		v, ok := d.value()
		if !ok {
			return nil, false
		}
		l = append(l, v)
		d.ws()
		if d.i >= len(d.s) {
			return nil, false
		}
		switch d.s[d.i] {
		case ']':
			d.i++
			return l, true
		case ',':
			d.i++
			d.ws()
		default:
			return nil, false
		}
	}
}

// pyDumps is json.dumps(v, sort_keys=True, separators=(",", ":"),
// ensure_ascii=True): mapping.to_env_vars' format_value.
func pyDumps(v pyValue) string {
	var b bytes.Buffer
	compactSorted.dump(&b, v)
	return b.String()
}

// pyDumpStyle is how json.dumps lays out containers.
type pyDumpStyle struct {
	sortKeys        bool
	itemSep, keySep string
}

var (
	// compactSorted is the toolkit's env-var form (mapping.py, to_env_vars).
	compactSorted = pyDumpStyle{true, ",", ":"}
	// pyDefault is json.dump(obj, f) with no options, as the toolkit
	// writes its own config files (environment.py, _write_json).
	pyDefault = pyDumpStyle{false, ", ", ": "}
)

func (st pyDumpStyle) dump(b *bytes.Buffer, v pyValue) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case pyInt:
		b.WriteString(string(v))
	case float64:
		switch {
		case math.IsNaN(v):
			b.WriteString("NaN")
		case math.IsInf(v, 1):
			b.WriteString("Infinity")
		case math.IsInf(v, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloatRepr(v))
		}
	case string:
		pyDumpString(b, v)
	case pyList:
		b.WriteByte('[')
		for i, it := range v {
			if i > 0 {
				b.WriteString(st.itemSep)
			}
			st.dump(b, it)
		}
		b.WriteByte(']')
	case *pyDict:
		keys := v.keys
		if st.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys) // UTF-8 byte order is code point order, as Python sorts
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(st.itemSep)
			}
			pyDumpString(b, k)
			b.WriteString(st.keySep)
			st.dump(b, v.vals[k])
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("pyDump: unexpected %T", v))
	}
}

// pyDumpString is json's py_encode_basestring_ascii: \" \\ \n \r \t \b \f,
// and \uXXXX (lower-case hex, surrogate pairs above U+FFFF) for every
// other character outside ' '..'~'.
func pyDumpString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r >= ' ' && r <= '~':
				b.WriteRune(r)
			case r > 0xffff:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				fmt.Fprintf(b, `\u%04x`, r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloatRepr is Python's repr(float) for a finite value: the shortest
// digits that round-trip, positional when the decimal exponent is in
// [-4, 16), else d.ddde±XX; positional values always show a fraction
// (1.0, 100.0).
func pyFloatRepr(f float64) string {
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX, shortest digits
	sign := ""
	if e[0] == '-' {
		sign, e = "-", e[1:]
	}
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	decpt := exp + 1 // digits before the point
	switch {
	case decpt <= 0:
		return sign + "0." + strings.Repeat("0", -decpt) + digits
	case decpt < len(digits):
		return sign + digits[:decpt] + "." + digits[decpt:]
	default:
		return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
	}
}

// pyStr is Python's str(v).
func pyStr(v pyValue) string {
	if s, ok := v.(string); ok {
		return s
	}
	return pyRepr(v)
}

// pyRepr is Python's repr(v).
func pyRepr(v pyValue) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case pyInt:
		return string(v)
	case float64:
		switch {
		case math.IsNaN(v):
			return "nan"
		case math.IsInf(v, 1):
			return "inf"
		case math.IsInf(v, -1):
			return "-inf"
		}
		return pyFloatRepr(v)
	case string:
		return pyReprString(v)
	case pyList:
		parts := make([]string, len(v))
		for i, it := range v {
			parts[i] = pyRepr(it)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *pyDict:
		parts := make([]string, len(v.keys))
		for i, k := range v.keys {
			parts[i] = pyReprString(k) + ": " + pyRepr(v.vals[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	panic(fmt.Sprintf("pyRepr: unexpected %T", v))
}

// pyReprString is unicode_repr: single quotes unless the text has a ' and
// no ", then double; \\, the quote, \t \n \r escaped; other characters
// below ' ' and DEL as \xNN; non-printable non-ASCII as \xNN, \uNNNN or
// \UNNNNNNNN (Python's isprintable is Go's unicode.IsPrint: letters,
// marks, numbers, punctuation, symbols and the ASCII space).
func pyReprString(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyTruthy is Python's bool(v).
func pyTruthy(v pyValue) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case pyInt:
		return v != "0"
	case float64:
		return v != 0
	case string:
		return v != ""
	case pyList:
		return len(v) > 0
	case *pyDict:
		return len(v.keys) > 0
	}
	return true
}
