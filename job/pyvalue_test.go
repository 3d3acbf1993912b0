package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestPyValueMatchesPython runs Python itself over a corpus of hyperparameter
// texts: for each, json.loads-else-the-text (the toolkit's typing), then
// json.dumps(sort_keys, compact, ASCII), str() and str.upper(), and
// compares with pyLoadsOrString, pyDumps, pyStr and pyUpper. The corpus has
// random doubles (repr's shortest digits and its two layouts), every
// character class repr treats differently, and malformed JSON.
func TestPyValueMatchesPython(t *testing.T) {
	corpus := []string{
		"", " ", "0", "-0", "01", "1.", ".5", "+1", "1e5", "1E+05", "1e-5", "-1.5e-7", "1e400", "-1e400", "1e-400",
		"NaN", "Infinity", "-Infinity", "nan", "inf", "true", "True", "false", "null", "None",
		`"x"`, `"\u00e9\ud83d\ude00"`, `"\/\b\f\n\r\t"`, `"\x"`, `"a`, "\"a\tb\"", `[1,]`, `{"a":1,}`, `{"a" 1}`,
		` [ 1 , 2.50 , "a" ] `, `{"b":{"d":[1,{"f":null}],"c":2},"a":true}`, `{"a":1,"a":2,"b":3}`, `[]`, `{}`,
		`[1e16, 1e15, 123456789012345680000.0, 0.1, 0.30000000000000004, 5e-324, 1.7976931348623157e308]`,
		"12345678901234567890123456789", strings.Repeat("9", 4300), strings.Repeat("9", 4301),
		`["it's", "say \"hi\"", "both ' and \"", "back\\slash"]`,
		"adam w", "it's", "学习率", "straße", "ﬁx", "ǅ", "ŉ", "ΐ",
	}
	// Characters repr and ensure_ascii treat differently, bare and in a list.
	for _, r := range []rune{0x01, 0x1f, 0x7f, 0x80, 0x85, 0x9f, 0xa0, 0xad, 0xff, 0x100, 0x378, 0x600, 0x61c,
		0x1680, 0x200b, 0x2028, 0x2029, 0x202f, 0x3000, 0xe000, 0xfeff, 0xfffd, 0xffff, 0x1f600, 0x1f1e6,
		0xe0001, 0xf0000, 0x10ffff} {
		s := string(r)
		q, _ := json.Marshal("a" + s + "'")
		corpus = append(corpus, "x"+s+"y", "["+string(q)+"]")
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		corpus = append(corpus, strconv.FormatFloat(f, 'g', -1, 64))
		corpus = append(corpus, strconv.FormatFloat(float64(rng.Intn(1_000_000))/math.Pow(10, float64(rng.Intn(30))), 'e', -1, 64))
	}

	py := `import json, sys
def typed(s):
    try:
        return json.loads(s)
    except ValueError:
        return s
out = []
for s in json.load(sys.stdin):
    v = typed(s)
    out.append([json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=True), str(v), s.upper()])
json.dump(out, sys.stdout)`
	in, err := json.Marshal(corpus)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", "-c", py)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var want [][3]string
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, s := range corpus {
		v := pyLoadsOrString(s)
		got := [3]string{pyDumps(v), pyStr(v), pyUpper(s)}
		for j, what := range []string{"json.dumps", "str", "upper"} {
			if got[j] != want[i][j] && bad < 20 {
				bad++
				t.Errorf("%s(%s):\n got %q\nwant %q", what, trunc(fmt.Sprintf("%q", s)), trunc(got[j]), trunc(want[i][j]))
			}
		}
	}
}
