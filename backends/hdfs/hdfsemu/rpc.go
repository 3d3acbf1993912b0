package hdfsemu

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"google.golang.org/protobuf/proto"

	common "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_common"
)

// Hadoop RPC constants (org.apache.hadoop.ipc.Server).
const (
	rpcVersion        = 9
	authNone          = 0
	connContextCallID = -3
	maxRPCFrame       = 64 << 20
	clientProtocol    = "org.apache.hadoop.hdfs.protocol.ClientProtocol"
)

// session is one client connection to the NameNode.
type session struct {
	conn net.Conn
	user string
	// principal is the Kerberos principal the client authenticated as
	// ("" with SIMPLE authentication); user is then its short name.
	principal string
	// denied, when set, fails every call (an impersonation attempt).
	denied string
	// localIP is the address the client reached us at.
	localIP string
	// clients are the client names that created or appended files over
	// this connection: their leases end with it.
	clients map[string]bool
}

// serveNameNode speaks Hadoop RPC on one connection: the "hrpc" preamble,
// the connection context, then length-prefixed calls answered in order.
func (s *Server) serveNameNode(c net.Conn) {
	r := bufio.NewReader(c)
	var pre [7]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return
	}
	if string(pre[:4]) != "hrpc" || pre[4] != rpcVersion {
		s.log.Warn("hdfsemu: namenode: not a Hadoop RPC v9 client", "remote", c.RemoteAddr())
		return
	}
	w := bufio.NewWriter(c)
	sess := &session{conn: c, clients: map[string]bool{}}
	switch {
	case s.opt.Kerberos != nil && pre[6] == authSASL:
		p, err := s.authenticate(r, w)
		if err != nil {
			s.log.Warn("hdfsemu: namenode: authentication failed", "remote", c.RemoteAddr(), "err", err)
			return
		}
		sess.principal = p
	case s.opt.Kerberos != nil:
		s.refuseSimple(r, w)
		return
	case pre[6] != authNone:
		s.log.Warn("hdfsemu: namenode: SASL offered but the emulator runs without --keytab (SIMPLE authentication)", "remote", c.RemoteAddr())
		return
	}
	defer s.recoverLeases(sess)
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		sess.localIP = a.IP.String()
	}
	for {
		frame, err := readFrame(r)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("hdfsemu: namenode: read", "err", err)
			}
			return
		}
		msgs, err := splitDelimited(frame)
		if err != nil || len(msgs) == 0 {
			s.log.Warn("hdfsemu: namenode: malformed frame", "err", err)
			return
		}
		hdr := &common.RpcRequestHeaderProto{}
		if err := proto.Unmarshal(msgs[0], hdr); err != nil {
			s.log.Warn("hdfsemu: namenode: bad RpcRequestHeaderProto", "err", err)
			return
		}
		if hdr.GetRpcOp() == common.RpcRequestHeaderProto_RPC_CLOSE_CONNECTION {
			return
		}
		if hdr.GetCallId() == connContextCallID {
			cc := &common.IpcConnectionContextProto{}
			if len(msgs) > 1 {
				if err := proto.Unmarshal(msgs[1], cc); err != nil {
					s.log.Warn("hdfsemu: namenode: bad connection context", "err", err)
					return
				}
			}
			sess.user = cc.GetUserInfo().GetEffectiveUser()
			if sess.user == "" {
				sess.user = cc.GetUserInfo().GetRealUser()
			}
			if sess.principal != "" {
				// The principal decides who the client is; a different
				// effective user would be impersonation (proxy users),
				// which is not emulated.
				short := shortName(sess.principal)
				name, _, _ := strings.Cut(sess.principal, "@")
				if u := sess.user; u != "" && u != short && u != name && u != sess.principal {
					sess.denied = fmt.Sprintf("User: %s is not allowed to impersonate %s", sess.principal, sess.user)
				}
				sess.user = short
			}
			continue
		}
		if hdr.GetCallId() < 0 {
			continue // other control calls (ping = -4): no answer expected
		}
		var resp proto.Message
		if len(msgs) < 2 {
			err = rerr(exIO, "RPC call without a request header")
		} else {
			rh := &common.RequestHeaderProto{}
			if err = proto.Unmarshal(msgs[1], rh); err == nil {
				var body []byte
				if len(msgs) > 2 {
					body = msgs[2]
				}
				if sess.denied != "" {
					err = &remoteError{class: exAccessControl, msg: sess.denied}
				} else if rh.GetDeclaringClassProtocolName() != clientProtocol {
					err = &remoteError{class: "org.apache.hadoop.ipc.RpcNoSuchProtocolException", msg: "unknown protocol " + rh.GetDeclaringClassProtocolName()}
				} else if s.chance(s.opt.Faults.RPCErrorRate) {
					err = rerr(exRetriable, "injected fault: %s", rh.GetMethodName())
				} else {
					resp, err = s.call(sess, rh.GetMethodName(), body)
				}
			}
		}
		s.sleep(s.opt.Faults.TTFB)
		if s.chance(s.opt.Faults.RPCDropRate) {
			return // the answer is lost with the connection
		}
		if err := writeResponse(w, hdr, resp, err); err != nil {
			s.log.Debug("hdfsemu: namenode: write", "err", err)
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

func readFrame(r io.Reader) ([]byte, error) {
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return nil, err
	}
	if n > maxRPCFrame {
		return nil, fmt.Errorf("RPC frame of %d bytes exceeds %d", n, maxRPCFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// splitDelimited splits a frame into its varint-length-prefixed messages.
func splitDelimited(b []byte) ([][]byte, error) {
	var out [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, errors.New("bad message length")
		}
		out = append(out, b[k:k+int(n)])
		b = b[k+int(n):]
	}
	return out, nil
}

func appendDelimited(buf *bytes.Buffer, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	var v [binary.MaxVarintLen64]byte
	buf.Write(v[:binary.PutUvarint(v[:], uint64(len(b)))])
	buf.Write(b)
	return nil
}

// writeResponse sends RpcResponseHeaderProto (+ the response on success).
func writeResponse(w io.Writer, req *common.RpcRequestHeaderProto, resp proto.Message, callErr error) error {
	h := &common.RpcResponseHeaderProto{
		CallId:              proto.Uint32(uint32(req.GetCallId())),
		Status:              common.RpcResponseHeaderProto_SUCCESS.Enum(),
		ServerIpcVersionNum: proto.Uint32(rpcVersion),
		ClientId:            req.GetClientId(),
		RetryCount:          proto.Int32(req.GetRetryCount()),
	}
	var body bytes.Buffer
	if callErr == nil && resp != nil {
		if err := appendDelimited(&body, resp); err != nil {
			callErr = rerr(exIO, "serialising response: %v", err)
			body.Reset()
		}
	}
	if callErr != nil {
		re, ok := callErr.(*remoteError)
		if !ok {
			re = &remoteError{class: exIO, msg: callErr.Error()}
		}
		h.Status = common.RpcResponseHeaderProto_ERROR.Enum()
		h.ExceptionClassName = proto.String(re.class)
		h.ErrorMsg = proto.String(re.msg)
		code := common.RpcResponseHeaderProto_ERROR_APPLICATION
		if re.class == exNoSuchMethod {
			code = common.RpcResponseHeaderProto_ERROR_NO_SUCH_METHOD
		}
		h.ErrorDetail = code.Enum()
		body.Reset()
	}
	var frame bytes.Buffer
	if err := appendDelimited(&frame, h); err != nil {
		return err
	}
	frame.Write(body.Bytes())
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(frame.Len()))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(frame.Bytes())
	return err
}
