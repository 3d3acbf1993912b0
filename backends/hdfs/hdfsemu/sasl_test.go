package hdfsemu_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/keytab"
	"google.golang.org/protobuf/proto"

	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	common "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_common"
	pb "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_hdfs"
)

// securedServer is an emulator that requires Kerberos. Its keytab is
// empty: no ticket verifies, which is all these tests need (the backend's
// tests cover a real KDC's tickets).
func securedServer(t *testing.T) *hdfsemu.Server {
	t.Helper()
	s, _ := start(t, hdfsemu.Options{Kerberos: &hdfsemu.Kerberos{Keytab: keytab.New(), Principal: "nn/127.0.0.1@MLFSD.TEST"}})
	return s
}

// readSASLAnswer reads one answer to a SASL call (call id -33).
func readSASLAnswer(t *testing.T, r *bufio.Reader) (*common.RpcResponseHeaderProto, *common.RpcSaslProto) {
	t.Helper()
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		t.Fatalf("reading the SASL answer: %v", err)
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(r, frame); err != nil {
		t.Fatal(err)
	}
	h := &common.RpcResponseHeaderProto{}
	l, k := binary.Uvarint(frame)
	if err := proto.Unmarshal(frame[k:k+int(l)], h); err != nil {
		t.Fatal(err)
	}
	if int32(h.GetCallId()) != -33 {
		t.Fatalf("answer to call %d, want the SASL call -33", int32(h.GetCallId()))
	}
	m := &common.RpcSaslProto{}
	if rest := frame[k+int(l):]; len(rest) > 0 {
		l, k := binary.Uvarint(rest)
		if err := proto.Unmarshal(rest[k:k+int(l)], m); err != nil {
			t.Fatal(err)
		}
	}
	return h, m
}

func writeSASL(t *testing.T, c net.Conn, m *common.RpcSaslProto) {
	t.Helper()
	body := delimited(t, &common.RpcRequestHeaderProto{CallId: proto.Int32(-33), ClientId: []byte("0123456789abcdef")}, m)
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)); err != nil {
		t.Fatal(err)
	}
}

// TestWireSecuredRefusesSimple: a secured NameNode answers a SIMPLE
// client's first call with Hadoop's AccessControlException, not data.
func TestWireSecuredRefusesSimple(t *testing.T) {
	s := securedServer(t)
	rc := dialRPC(t, s.Addr(), "root")
	h := rc.do("getFileInfo", &pb.GetFileInfoRequestProto{Src: proto.String("/")}, &pb.GetFileInfoResponseProto{})
	if h.GetStatus() == common.RpcResponseHeaderProto_SUCCESS || !strings.HasSuffix(h.GetExceptionClassName(), "AccessControlException") ||
		!strings.Contains(h.GetErrorMsg(), "SIMPLE authentication is not enabled") {
		t.Fatalf("SIMPLE call on a secured NameNode: %v %s: %s", h.GetStatus(), h.GetExceptionClassName(), h.GetErrorMsg())
	}
}

// TestWireSASLNegotiation: a SASL client is offered KERBEROS/GSSAPI for the
// NameNode's principal; a token that is not a valid AP-REQ is refused with
// a SaslException and the connection closes; a call before
// authentication closes the connection unanswered.
func TestWireSASLNegotiation(t *testing.T) {
	s := securedServer(t)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang guard
		if _, err := c.Write([]byte("hrpc\x09\x00\xdf")); err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}

	c, r := dial()
	writeSASL(t, c, &common.RpcSaslProto{State: common.RpcSaslProto_NEGOTIATE.Enum()})
	h, m := readSASLAnswer(t, r)
	if h.GetStatus() != common.RpcResponseHeaderProto_SUCCESS || m.GetState() != common.RpcSaslProto_NEGOTIATE || len(m.GetAuths()) != 1 {
		t.Fatalf("NEGOTIATE answer: %v %v", h, m)
	}
	a := m.GetAuths()[0]
	if a.GetMethod() != "KERBEROS" || a.GetMechanism() != "GSSAPI" || a.GetProtocol() != "nn" || a.GetServerId() != "127.0.0.1" {
		t.Errorf("offered %v, want KERBEROS/GSSAPI for nn/127.0.0.1", a)
	}
	writeSASL(t, c, &common.RpcSaslProto{State: common.RpcSaslProto_INITIATE.Enum(), Token: []byte("not a kerberos token"), Auths: m.GetAuths()})
	h, _ = readSASLAnswer(t, r)
	if h.GetStatus() == common.RpcResponseHeaderProto_SUCCESS || !strings.HasSuffix(h.GetExceptionClassName(), "SaslException") {
		t.Errorf("a bad token: %v %s: %s", h.GetStatus(), h.GetExceptionClassName(), h.GetErrorMsg())
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after a refused token the connection is still open: %v", err)
	}

	// A call instead of the negotiation.
	c, r = dial()
	body := delimited(t, &common.RpcRequestHeaderProto{CallId: proto.Int32(0), ClientId: []byte("0123456789abcdef")},
		&common.RequestHeaderProto{MethodName: proto.String("getFileInfo"), DeclaringClassProtocolName: proto.String("org.apache.hadoop.hdfs.protocol.ClientProtocol"), ClientProtocolVersion: proto.Uint64(1)},
		&pb.GetFileInfoRequestProto{Src: proto.String("/")})
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("a call before authentication was answered or left open: %v", err)
	}
}
