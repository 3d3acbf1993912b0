// Command testreport reads `go test -json` events on stdin and prints what
// plain `go test` would (failing tests' output, build errors, one line per
// package), then the slowest tests and packages, then the packages'
// closing lines again, and last, when anything failed, the failing tests
// by name (and the packages that failed without a failing test: a build
// error, a panic, a timeout), so that the end of a long run says what to
// rerun. It exits 1 when any package or test failed.
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
	"regexp"
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
	var failedTests []string
	failedIn := map[string]bool{} // packages with a failing test
	var failedPackages []string   // packages that failed, in order
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
				failedTests = append(failedTests, short(e.Package)+" "+e.Test)
				failedIn[e.Package] = true
			} else if e.Package != "" {
				failedPackages = append(failedPackages, e.Package)
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
	printFailures(out, failedTests, failedPackages, failedIn)
	return failed, nil
}

// printFailures names what failed, last, so the end of the run says it:
// each failing test (a subtest under its parent, which fails with it) with
// the command that reruns it, and each package that failed with no test
// failing (a build error, a panic or a timeout: its output is above).
func printFailures(out io.Writer, tests, packages []string, failedIn map[string]bool) {
	var bare []string
	for _, p := range packages {
		if !failedIn[p] {
			bare = append(bare, short(p))
		}
	}
	if len(tests) == 0 && len(bare) == 0 {
		return
	}
	fmt.Fprintf(out, "\nFAILED: %d tests, %d packages without a failing test\n", len(tests), len(bare))
	for _, t := range tests {
		pkg, name, _ := strings.Cut(t, " ")
		var run []string
		for _, part := range strings.Split(name, "/") {
			run = append(run, "^"+regexp.QuoteMeta(part)+"$")
		}
		fmt.Fprintf(out, "  %-60s go test -race -count=1 -run '%s' ./%s\n", t, strings.Join(run, "/"), pkg)
	}
	for _, p := range bare {
		fmt.Fprintf(out, "  %-60s (build error, panic or timeout: see its output above)\n", p)
	}
}

// short is a package's path inside the module.
func short(pkg string) string { return strings.TrimPrefix(pkg, "github.com/mlfsd/mlfsd/") }

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
		fmt.Fprintf(out, "  %9v  %s\n", d, short(t.name))
	}
}
