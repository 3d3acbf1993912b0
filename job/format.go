package job

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
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
	// ParseDotenv reads it back exactly; so does python-dotenv, except
	// that it expands ${NAME} in double-quoted values (unless
	// interpolate=False), and that it cannot read a value ending in a
	// backslash (its pattern takes the final \" for an escaped quote).
	// Use the shell or json format for such values.
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
			b.WriteString(v.Name + "=\"" + dotenvEscape(v.Value) + "\"\n")
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

func dotenvEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`).Replace(s)
}

// ParseDotenv reads what WriteEnv writes in FormatDotenv (blank lines and
// lines starting with # are skipped).
func ParseDotenv(r io.Reader) ([]Var, error) {
	var vars []Var
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 4*maxEnvString) // an escaped value may be twice its size
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, q, ok := strings.Cut(line, "=")
		if !ok || len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
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
