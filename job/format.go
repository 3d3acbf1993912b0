package job

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Formats of WriteEnv.
const (
	// FormatShell writes `export NAME='value'` lines for eval in a POSIX
	// shell; a ' in a value is written '\''. eval restores every byte.
	// A name a shell cannot hold (SageMaker's SM_HP_BATCH-SIZE keeps the
	// '-' of batch-size) is written as a comment line, `# not a shell
	// name: NAME`: mlfsd run still sets it; use the json or dotenv
	// format to read it.
	FormatShell = "shell"
	// FormatDotenv writes NAME="value" lines. Inside the double quotes a
	// backslash is written \\, a double quote \", a newline \n and a
	// carriage return \r; every other byte (tabs, $, ', unicode) is as is.
	// ParseDotenv reads it back exactly, and so does python-dotenv, except
	// that it expands ${NAME} in values unless interpolate=False.
	// python-dotenv cannot read a quoted value that ends in a backslash
	// (its pattern takes the final \" for an escaped quote and runs on into
	// the next line), so such a value is written unquoted, NAME=value,
	// which it reads literally. A name python-dotenv cannot read bare
	// (SM_HP_WITH SPACE) is single-quoted: 'NAME'="value". A variable
	// neither form can carry (a value ending in a backslash that also holds
	// a newline, starts with a quote or blank, or has a blank before a #;
	// a name with both a blank and a ') is written as a comment line,
	// "# not representable in dotenv: NAME"; use the json format for it.
	FormatDotenv = "dotenv"
	// FormatJSON writes one JSON object, names in Env order, string values.
	FormatJSON = "json"
)

// WriteEnv writes vars to w in the given format.
func WriteEnv(w io.Writer, format string, vars []Var) error {
	var b bytes.Buffer
	switch format {
	case FormatShell:
		for _, v := range vars {
			if !isShellName(v.Name) {
				b.WriteString("# not a shell name: " + strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(v.Name) + "\n")
				continue
			}
			b.WriteString("export " + v.Name + "='" + strings.ReplaceAll(v.Value, "'", `'\''`) + "'\n")
		}
	case FormatDotenv:
		for _, v := range vars {
			b.WriteString(dotenvLine(v))
		}
	case FormatJSON:
		b.WriteString("{")
		for i, v := range vars {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("\n  ")
			writeJSONString(&b, v.Name)
			b.WriteString(": ")
			writeJSONString(&b, v.Value)
		}
		if len(vars) > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("}\n")
	default:
		return fmt.Errorf("unknown format %q: want %s, %s or %s", format, FormatShell, FormatDotenv, FormatJSON)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// isShellName reports whether a POSIX shell can export name:
// [A-Za-z_][A-Za-z0-9_]*.
func isShellName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return name != ""
}

// dotenvLine is one variable in FormatDotenv, newline included.
func dotenvLine(v Var) string {
	skip := "# not representable in dotenv: " + strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(v.Name) + "\n"
	key := v.Name
	if !dotenvBareKey(key) {
		if strings.ContainsAny(key, "'\r\n") {
			return skip
		}
		key = "'" + key + "'"
	}
	if !strings.HasSuffix(v.Value, `\`) {
		return key + "=\"" + dotenvEscape(v.Value) + "\"\n"
	}
	if !dotenvBareValue(v.Value) {
		return skip
	}
	return key + "=" + v.Value + "\n"
}

// pyIsSpace is Python's str.isspace for one character, which python-dotenv's
// patterns use (\s): Unicode White_Space, as Go's unicode.IsSpace, and
// the separators U+001C..U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// dotenvBareKey reports whether python-dotenv reads name unquoted
// (_unquoted_key: [^=\#\s]+, and not starting with a quote).
func dotenvBareKey(name string) bool {
	if name == "" || name[0] == '\'' {
		return false
	}
	for _, r := range name {
		if r == '=' || r == '#' || pyIsSpace(r) {
			return false
		}
	}
	return true
}

// dotenvBareValue reports whether python-dotenv reads s unquoted as is:
// _unquoted_value takes the rest of the line, drops a blank-then-# comment
// and trailing blanks; the = pattern eats leading blanks; a leading quote
// starts a quoted value.
func dotenvBareValue(s string) bool {
	if s == "" || strings.ContainsAny(s, "\r\n") || s[0] == '\'' || s[0] == '"' {
		return false
	}
	prevSpace := false
	for i, r := range s {
		sp := pyIsSpace(r)
		if sp && i == 0 || r == '#' && prevSpace {
			return false
		}
		prevSpace = sp
	}
	last, _ := utf8.DecodeLastRuneInString(s)
	return !pyIsSpace(last)
}

func dotenvEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`).Replace(s)
}

// ParseDotenv reads what WriteEnv writes in FormatDotenv: NAME="escaped",
// NAME=literal (to the end of the line), and either with 'NAME'. Blank
// lines and lines starting with # are skipped.
func ParseDotenv(r io.Reader) ([]Var, error) {
	var vars []Var
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 4*maxEnvString) // an escaped value may be twice its size
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		var name, q string
		var ok bool
		if line[0] == '\'' {
			name, q, ok = strings.Cut(line[1:], "'=")
		} else {
			name, q, ok = strings.Cut(line, "=")
		}
		if !ok {
			return nil, fmt.Errorf("dotenv line %d: want NAME=\"value\"", n)
		}
		if q == "" || q[0] != '"' {
			vars = append(vars, Var{name, q})
			continue
		}
		if len(q) < 2 || q[len(q)-1] != '"' {
			return nil, fmt.Errorf("dotenv line %d: want NAME=\"value\"", n)
		}
		q = q[1 : len(q)-1]
		var v strings.Builder
		for i := 0; i < len(q); i++ {
			c := q[i]
			if c == '"' {
				return nil, fmt.Errorf("dotenv line %d: unescaped \" in value", n)
			}
			if c != '\\' {
				v.WriteByte(c)
				continue
			}
			i++
			if i == len(q) {
				return nil, fmt.Errorf("dotenv line %d: value ends in a lone backslash", n)
			}
			switch q[i] {
			case '\\', '"':
				v.WriteByte(q[i])
			case 'n':
				v.WriteByte('\n')
			case 'r':
				v.WriteByte('\r')
			default:
				return nil, fmt.Errorf("dotenv line %d: unknown escape \\%c", n, q[i])
			}
		}
		vars = append(vars, Var{name, v.String()})
	}
	return vars, sc.Err()
}
