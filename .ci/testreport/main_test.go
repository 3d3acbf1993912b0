package main

import (
	"strings"
	"testing"
)

// TestReportEndsWithFailures: after go test's closing lines, the report
// names each failing test with the command that reruns it, and a package
// that failed with no failing test (here a panic).
func TestReportEndsWithFailures(t *testing.T) {
	events := `{"Action":"run","Package":"github.com/mlfsd/mlfsd/cache","Test":"TestA"}
{"Action":"output","Package":"github.com/mlfsd/mlfsd/cache","Test":"TestA/sub","Output":"    a_test.go:1: boom\n"}
{"Action":"fail","Package":"github.com/mlfsd/mlfsd/cache","Test":"TestA/sub","Elapsed":0.1}
{"Action":"fail","Package":"github.com/mlfsd/mlfsd/cache","Test":"TestA","Elapsed":0.2}
{"Action":"pass","Package":"github.com/mlfsd/mlfsd/cache","Test":"TestB","Elapsed":0.2}
{"Action":"output","Package":"github.com/mlfsd/mlfsd/cache","Output":"FAIL\tgithub.com/mlfsd/mlfsd/cache\t1.0s\n"}
{"Action":"fail","Package":"github.com/mlfsd/mlfsd/cache","Elapsed":1}
{"Action":"output","Package":"github.com/mlfsd/mlfsd/fs","Output":"panic: x\n"}
{"Action":"output","Package":"github.com/mlfsd/mlfsd/fs","Output":"FAIL\tgithub.com/mlfsd/mlfsd/fs\t2.0s\n"}
{"Action":"fail","Package":"github.com/mlfsd/mlfsd/fs","Elapsed":2}
{"Action":"output","Package":"github.com/mlfsd/mlfsd/job","Output":"ok  \tgithub.com/mlfsd/mlfsd/job\t0.5s\n"}
{"Action":"pass","Package":"github.com/mlfsd/mlfsd/job","Elapsed":0.5}
`
	var out strings.Builder
	failed, err := report(strings.NewReader(events), &out, 5)
	if err != nil || !failed {
		t.Fatalf("report: failed=%v, %v", failed, err)
	}
	want := `
ok  	github.com/mlfsd/mlfsd/job	0.5s

FAILED: 2 tests, 1 packages without a failing test
  cache TestA/sub                                              go test -race -count=1 -run '^TestA$/^sub$' ./cache
  cache TestA                                                  go test -race -count=1 -run '^TestA$' ./cache
  fs                                                           (build error, panic or timeout: see its output above)
`
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("report ends:\n%s\nwant it to end:\n%s", out.String(), want)
	}

	out.Reset()
	failed, err = report(strings.NewReader(events[strings.Index(events, `{"Action":"output","Package":"github.com/mlfsd/mlfsd/job"`):]), &out, 5)
	if err != nil || failed || strings.Contains(out.String(), "FAILED") {
		t.Errorf("a passing run: failed=%v, %v, output:\n%s", failed, err, out.String())
	}
}
