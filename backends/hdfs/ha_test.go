package hdfs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/endpointtest"
	"github.com/mlfsd/mlfsd/backends/hdfs"
	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// standbyNamenode is a NameNode in standby: it speaks Hadoop RPC and
// answers every call with a StandbyException, as the standby of an HA pair
// does. It returns host:port.
func standbyNamenode(t *testing.T) string {
	t.Helper()
	addr, _ := endpointtest.Serve(t, serveStandby)
	return addr
}

// serveStandby reads the connection header ("hrpc", version, class, auth),
// then length-prefixed request packets, and answers each call but the
// handshake (call id -3) with a StandbyException.
func serveStandby(c net.Conn) {
	var hdr [7]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil || string(hdr[:4]) != "hrpc" {
		return
	}
	for {
		var n uint32
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		pkt := make([]byte, n)
		if _, err := io.ReadFull(c, pkt); err != nil {
			return
		}
		call, ok := callID(pkt)
		if !ok {
			return
		}
		if call == -3 {
			continue // the connection context: no answer
		}
		var h []byte
		h = protowire.AppendTag(h, 1, protowire.VarintType) // callId
		h = protowire.AppendVarint(h, uint64(uint32(call)))
		h = protowire.AppendTag(h, 2, protowire.VarintType) // status ERROR
		h = protowire.AppendVarint(h, 1)
		h = protowire.AppendTag(h, 4, protowire.BytesType) // exceptionClassName
		h = protowire.AppendString(h, "org.apache.hadoop.ipc.StandbyException")
		h = protowire.AppendTag(h, 5, protowire.BytesType) // errorMsg
		h = protowire.AppendString(h, "Operation category READ is not supported in state standby")
		h = protowire.AppendTag(h, 6, protowire.VarintType) // errorDetail ERROR_APPLICATION
		h = protowire.AppendVarint(h, 1)
		body := protowire.AppendBytes(nil, h)
		out := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		if _, err := c.Write(append(out, body...)); err != nil {
			return
		}
	}
}

// callID reads the callId (field 3, sint32) of the RpcRequestHeaderProto
// that starts a request packet.
func callID(pkt []byte) (int32, bool) {
	hdr, n := protowire.ConsumeBytes(pkt)
	if n < 0 {
		return 0, false
	}
	for len(hdr) > 0 {
		num, typ, n := protowire.ConsumeTag(hdr)
		if n < 0 {
			return 0, false
		}
		hdr = hdr[n:]
		if num == 3 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(hdr)
			if n < 0 {
				return 0, false
			}
			return int32(protowire.DecodeZigZag(v)), true
		}
		n = protowire.ConsumeFieldValue(num, typ, hdr)
		if n < 0 {
			return 0, false
		}
		hdr = hdr[n:]
	}
	return 0, false
}

// TestHAFirstNamenodeFails: whatever the first NameNode of an HA list does
// (accepts and stays silent, refuses, answers as a standby), the backend
// fails over to the second, a working one, on first contact and for every
// later client: stat, list, reads through every shared connection and a
// write (a client of its own) all work.
func TestHAFirstNamenodeFails(t *testing.T) {
	root := t.TempDir()
	data := randData(11, 300000)
	if err := os.WriteFile(filepath.Join(root, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := emulator(t, hdfsemu.Options{Root: root, BlockSize: 64 << 10})
	var silentAccepted *atomic.Int32
	for _, tc := range []struct {
		name  string
		first func(*testing.T) string
	}{
		{"silent", func(t *testing.T) string {
			addr, n := endpointtest.SilentCounting(t)
			silentAccepted = n
			return addr
		}},
		{"closed", func(t *testing.T) string { return endpointtest.Closed(t) }},
		{"standby", standbyNamenode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := tc.first(t)
			u, err := backends.ParseURI("hdfs://" + first + "," + s.Addr() + "/")
			if err != nil {
				t.Fatal(err)
			}
			// A short connect timeout keeps the silent case quick; nothing
			// here depends on how long anything takes.
			b, err := hdfs.New(t.Context(), u, hdfs.Options{User: "root", ConnectTimeout: time.Second, RetryBackoff: time.Millisecond}, nil)
			if err != nil {
				t.Fatalf("New with %s first NameNode %s: %v", tc.name, first, err)
			}
			defer b.Close()
			o, err := b.Stat(t.Context(), "f")
			if err != nil || o.Size != int64(len(data)) {
				t.Fatalf("Stat: %+v, %v", o, err)
			}
			page, err := b.List(t.Context(), backends.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Objects) == 0 || page.Objects[0].Key != "f" || page.Objects[0].Size != int64(len(data)) {
				t.Fatalf("List: %+v", page.Objects)
			}
			for i := 0; i < 8; i++ { // through every shared connection
				off := int64(i * 30000)
				got, err := readAll(t, b, "f", off, 40000)
				if err != nil || !bytes.Equal(got, data[off:off+40000]) {
					t.Fatalf("read #%d at %d: %d bytes, %v", i, off, len(got), err)
				}
			}
			key := "out-" + tc.name
			w, err := b.Write(t.Context(), key, backends.WriteOptions{SizeHint: -1})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte("written past a " + tc.name + " namenode")); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			if tc.name == "silent" {
				// New clients go to the NameNode that answered: the silent
				// one was tried by the first client only. (Its accept loop
				// may lag behind the kernel's: wait for the first accept.)
				testwait.Until(testwait.Guard, func() bool { return silentAccepted.Load() > 0 }) // the count below says if not
				if n := silentAccepted.Load(); n != 1 {
					t.Errorf("the silent NameNode was tried %d times, want once", n)
				}
			}
			if got, err := os.ReadFile(filepath.Join(root, key)); err != nil || string(got) != "written past a "+tc.name+" namenode" {
				t.Fatalf("written file: %q, %v", got, err)
			}
		})
	}
}

// TestHAAllNamenodesFail: when no NameNode answers, New fails (without
// waiting on the silent one again and again) with an error that names every
// NameNode and what each did.
func TestHAAllNamenodesFail(t *testing.T) {
	silent, closed, standby := endpointtest.Silent(t), endpointtest.Closed(t), standbyNamenode(t)
	u, err := backends.ParseURI("hdfs://" + silent + "," + closed + "," + standby + "/data/")
	if err != nil {
		t.Fatal(err)
	}
	_, err = hdfs.New(t.Context(), u, hdfs.Options{User: "root", ConnectTimeout: time.Second, RetryBackoff: time.Millisecond}, nil)
	if err == nil {
		t.Fatal("New succeeded with no working NameNode")
	}
	if !errors.Is(err, backends.ErrTransient) {
		t.Errorf("error %v is not ErrTransient", err)
	}
	msg := err.Error()
	for _, want := range []string{
		silent + " accepted the connection but did not answer within 1s (connect timeout)",
		closed + " failed: dial tcp " + closed,
		"connection refused",
		standby + " is a standby (StandbyException)",
		"(1 attempt)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
}

// TestDataIDNamesTheCluster: a channel opened through an HA nameservice
// and one opened through one of its NameNodes (under its address, or the
// name "localhost") have the same data identity, so write-back staging
// finds its pending files whichever form a restart uses; another path is
// another store.
func TestDataIDNamesTheCluster(t *testing.T) {
	s := emulator(t, hdfsemu.Options{})
	dead := endpointtest.Closed(t)
	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "hdfs-site.xml"), []byte(`<configuration>
<property><name>dfs.nameservices</name><value>openpai</value></property>
<property><name>dfs.ha.namenodes.openpai</name><value>nn1,nn2</value></property>
<property><name>dfs.namenode.rpc-address.openpai.nn1</name><value>`+dead+`</value></property>
<property><name>dfs.namenode.rpc-address.openpai.nn2</name><value>`+s.Addr()+`</value></property>
</configuration>`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(s.Addr())
	id := func(uri string) string {
		u, err := backends.ParseURI(uri)
		if err != nil {
			t.Fatal(err)
		}
		b, err := hdfs.New(t.Context(), u, hdfs.Options{User: "root", ConfDir: conf}, nil)
		if err != nil {
			t.Fatalf("%s: %v", uri, err)
		}
		defer b.Close()
		return backends.DataIdentity(b)
	}
	ns, byAddr, byName := id("hdfs://openpai/out/"), id("hdfs://"+s.Addr()+"/out/"), id("hdfs://localhost:"+port+"/out/")
	for _, other := range []string{byAddr, byName} {
		if !backends.SameStore(ns, other) {
			t.Errorf("nameservice identity %q and namenode identity %q are not one store", ns, other)
		}
	}
	if !strings.Contains(ns, "openpai") {
		t.Errorf("nameservice identity %q does not name the nameservice", ns)
	}
	if other := id("hdfs://openpai/elsewhere/"); backends.SameStore(ns, other) {
		t.Errorf("%q and %q count as one store", ns, other)
	}
}
