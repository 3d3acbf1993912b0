// Command testreport reads `go test -json` events on stdin and prints what
// plain `go test` would (failing tests' output, build errors, one line per
// package), then the slowest tests and packages, and last the packages'
// closing lines again, so the output still ends as go test's does. It exits
// 1 when any package or test failed.
//
//	go test -json ./... | go run ./.ci/testreport [-n 25]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json output.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type timing struct {
	name    string
	elapsed float64
}

func main() {
	top := flag.Int("n", 25, "how many of the slowest tests to list")
	flag.Parse()
	failed, err := report(os.Stdin, os.Stdout, *top)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

func report(in io.Reader, out io.Writer, top int) (failed bool, err error) {
	output := map[string][]string{} // package + "\x00" + test -> its lines
	var tests, packages []timing
	var closing []string // packages' closing lines, in the order they came
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(out, "%s\n", line) // not an event: go's own message
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output", "build-output":
			if e.Test == "" {
				if isClosing(e.Output) {
					closing = append(closing, e.Output)
				}
				if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			if !strings.HasPrefix(e.Output, "=== ") {
				output[key] = append(output[key], e.Output)
			}
		case "fail", "build-fail":
			failed = true
			if e.Test != "" {
				fmt.Fprint(out, strings.Join(output[key], ""))
			}
			fallthrough
		case "pass":
			if e.Test == "" {
				packages = append(packages, timing{e.Package, e.Elapsed})
			} else if !strings.Contains(e.Test, "/") {
				tests = append(tests, timing{e.Package + " " + e.Test, e.Elapsed})
			}
			delete(output, key)
		case "skip":
			delete(output, key)
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	printSlowest(out, "slowest tests", tests, top)
	printSlowest(out, "slowest packages", packages, 10)
	fmt.Fprintln(out)
	for _, l := range closing {
		fmt.Fprint(out, strings.TrimSuffix(l, "\n")+"\n")
	}
	return failed, nil
}

// isClosing reports whether a package-level line is go test's last word
// on the package: "ok  ...", "FAIL\t...", "?   \t... [no test files]".
func isClosing(l string) bool {
	return strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "?   \t")
}

func printSlowest(out io.Writer, title string, ts []timing, n int) {
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].elapsed > ts[j].elapsed })
	if len(ts) > n {
		ts = ts[:n]
	}
	fmt.Fprintf(out, "\n%s:\n", title)
	for _, t := range ts {
		d := time.Duration(t.elapsed * float64(time.Second)).Round(10 * time.Millisecond)
		fmt.Fprintf(out, "  %9v  %s\n", d, strings.TrimPrefix(t.name, "github.com/mlfsd/mlfsd/"))
	}
}
