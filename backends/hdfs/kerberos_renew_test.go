package hdfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/backends/hdfs/krbtest"
)

// kdcIssued counts the tickets the KDC's log says it issued to client for
// service (AS_REQ for a TGT, TGS_REQ for a service ticket).
func kdcIssued(kdc *krbtest.KDC, req, client, service string) int {
	n := 0
	for _, l := range strings.Split(kdc.Log(), "\n") {
		if strings.Contains(l, req) && strings.Contains(l, "ISSUE") && strings.Contains(l, client+" for "+service) {
			n++
		}
	}
	return n
}

// TestKerberosRenewalUnderLoad: with one-minute tickets, a job writes and
// reads back files for as long as three renewals of its TGT take (about
// three minutes), while the NameNode drops connections now and then so
// the backend keeps making new ones, each needing a service ticket from a
// current TGT. Reads are retried by the backend; a write whose connection
// dropped fails with ErrTransient and is uploaded again, as the write-back
// queue does. No operation fails for good, none fails authenticating, and
// every file is there, intact, at the end. It runs in parallel with the
// package's other tests.
func TestKerberosRenewalUnderLoad(t *testing.T) {
	t.Parallel()
	kdc, s, keytab := securedEmulator(t, krbtest.Options{TicketLifetime: time.Minute}, hdfsemu.Faults{RPCDropRate: 0.02, Seed: 7})
	opt := kerberosOptions(kdc)
	opt.Retries = 0 // the default: drops are retried
	opt.Kerberos.Principal, opt.Kerberos.KeytabFile = "alice", keytab
	b, err := openErr(s, "/data/", opt)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	alice, tgt, nn := "alice@"+kdc.Realm, "krbtgt/"+kdc.Realm+"@"+kdc.Realm, "nn/127.0.0.1@"+kdc.Realm
	ctx := t.Context()
	deadline := time.Now().Add(8 * time.Minute) // a hang guard: three renewals take three minutes
	written := map[string][]byte{}
	var failures []string
	reuploads := 0
	for i := 0; ; i++ {
		// The first login plus three re-logins, each of which a new
		// connection used: done.
		logins := kdcIssued(kdc, "AS_REQ", alice, tgt)
		if logins >= 4 && kdcIssued(kdc, "TGS_REQ", alice, nn) >= 4 {
			t.Logf("%d logins, %d service tickets, %d writes, %d uploads again after a dropped connection", logins, kdcIssued(kdc, "TGS_REQ", alice, nn), i, reuploads)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 8 minutes: %d logins and %d service tickets for %s, want 4 of each\n%s", logins, kdcIssued(kdc, "TGS_REQ", alice, nn), alice, kdc.Log())
		}
		// 250 keys, overwritten in turn: the end check stays short.
		key := fmt.Sprintf("step-%03d", i%250)
		data := randData(int64(i), 64<<10+i)
		err := writeKey(ctx, b, key, data)
		for try := 1; err != nil && try < 5 && errors.Is(err, backends.ErrTransient) && !authError(err); try++ {
			reuploads++
			err = writeKey(ctx, b, key, data)
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: write: %v", key, err))
			continue
		}
		written[key] = data
		// Read back this file and one from earlier (likely through
		// another connection).
		for _, k := range []string{key, fmt.Sprintf("step-%03d", (i/2)%250)} {
			if want, ok := written[k]; ok {
				if got, err := readKey(ctx, b, k); err != nil || !bytes.Equal(got, want) || authError(err) {
					failures = append(failures, fmt.Sprintf("%s: read: %d bytes, %v", k, len(got), err))
				}
			}
		}
	}
	if len(failures) > 0 {
		t.Errorf("%d failures across the renewals:\n%s", len(failures), strings.Join(failures, "\n"))
	}
	listed := 0
	for tok := ""; ; {
		page, err := b.List(ctx, backends.ListOptions{Recursive: true, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			if _, ok := written[o.Key]; !ok {
				t.Errorf("listed %q, which was never written", o.Key)
			}
		}
		listed += len(page.Objects)
		if tok = page.NextToken; tok == "" {
			break
		}
	}
	if listed != len(written) {
		t.Errorf("listing has %d files, %d were written", listed, len(written))
	}
	for k, want := range written {
		if got, err := readKey(ctx, b, k); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s at the end: %d bytes, %v", k, len(got), err)
		}
	}
}

// authError reports an error that comes from authentication rather than
// from a dropped connection.
func authError(err error) bool {
	if err == nil {
		return false
	}
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "kerberos") || strings.Contains(m, "sasl") || strings.Contains(m, "gss") || strings.Contains(m, "ticket") || errors.Is(err, backends.ErrPermission)
}

func writeKey(ctx context.Context, b backends.Backend, key string, data []byte) error {
	w, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: int64(len(data))})
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort(ctx)
		return err
	}
	_, err = w.Commit(ctx)
	return err
}

func readKey(ctx context.Context, b backends.Backend, key string) ([]byte, error) {
	r, err := b.Read(ctx, key, backends.ReadOptions{Length: -1})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
