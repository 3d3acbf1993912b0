package hdfsemu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"
	"google.golang.org/protobuf/proto"

	common "github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu/internal/proto/hdfsemu_common"
)

// SASL on Hadoop RPC (org.apache.hadoop.security.SaslRpcServer).
const (
	authSASL          = 0xdf // the preamble's auth byte: -33
	saslCallID        = -33
	exSasl            = "javax.security.sasl.SaslException"
	saslLayerNone     = 0x01 // GSSAPI security layer: authentication only
	maxSASLBufferSize = 0    // with no security layer, no wrapped messages
)

// Kerberos makes the NameNode a secured one: every client must
// authenticate with SASL/GSSAPI (Kerberos), presenting a service ticket
// for Principal that the keytab decrypts. The authenticated principal's
// first component is the user that permission checks see (Hadoop's
// default auth_to_local rule). SIMPLE clients are refused, as a secured
// NameNode refuses them. Only the "authentication" protection level
// (hadoop.rpc.protection) is offered; DataNode transfers are not secured
// (no block tokens).
type Kerberos struct {
	// Keytab holds the NameNode principal's keys.
	Keytab *keytab.Keytab
	// Principal is the NameNode's service principal, "nn/HOST@REALM".
	Principal string
}

// saslServerID splits "nn/HOST@REALM" into the SASL protocol and server id
// the negotiation advertises.
func (k *Kerberos) saslServerID() (protocol, serverID string) {
	name, _, _ := strings.Cut(k.Principal, "@")
	protocol, serverID, _ = strings.Cut(name, "/")
	return protocol, serverID
}

// refuse answers callID with an error before the connection closes: the
// SASL call of a client that failed authentication, or the first call of a
// SIMPLE client.
func (s *Server) refuse(w *bufio.Writer, callID int32, class, msg string) {
	s.log.Warn("hdfsemu: namenode: refused", "reason", msg)
	hdr := &common.RpcRequestHeaderProto{CallId: proto.Int32(callID)}
	if err := writeResponse(w, hdr, nil, &remoteError{class: class, msg: msg}); err == nil {
		_ = w.Flush()
	}
}

// refuseSimple answers a SIMPLE client's first call with the error a
// secured NameNode gives, so the client reports why.
func (s *Server) refuseSimple(r *bufio.Reader, w *bufio.Writer) {
	for {
		frame, err := readFrame(r)
		if err != nil {
			return
		}
		msgs, err := splitDelimited(frame)
		if err != nil || len(msgs) == 0 {
			return
		}
		hdr := &common.RpcRequestHeaderProto{}
		if err := proto.Unmarshal(msgs[0], hdr); err != nil {
			return
		}
		if hdr.GetCallId() >= 0 {
			s.refuse(w, hdr.GetCallId(), exAccessControl, "SIMPLE authentication is not enabled.  Available:[KERBEROS]")
			return
		}
	}
}

// readSASL reads one SASL message from the client.
func readSASL(r io.Reader) (*common.RpcSaslProto, error) {
	frame, err := readFrame(r)
	if err != nil {
		return nil, err
	}
	msgs, err := splitDelimited(frame)
	if err != nil || len(msgs) < 2 {
		return nil, fmt.Errorf("malformed SASL frame: %v", err)
	}
	hdr := &common.RpcRequestHeaderProto{}
	if err := proto.Unmarshal(msgs[0], hdr); err != nil {
		return nil, err
	}
	if hdr.GetCallId() != saslCallID {
		return nil, fmt.Errorf("call %d before authentication", hdr.GetCallId())
	}
	m := &common.RpcSaslProto{}
	if err := proto.Unmarshal(msgs[1], m); err != nil {
		return nil, err
	}
	return m, nil
}

func writeSASL(w *bufio.Writer, m *common.RpcSaslProto) error {
	hdr := &common.RpcRequestHeaderProto{CallId: proto.Int32(saslCallID)}
	if err := writeResponse(w, hdr, m, nil); err != nil {
		return err
	}
	return w.Flush()
}

// authenticate runs the SASL GSSAPI exchange on a new connection and
// returns the authenticated principal ("alice@REALM"). A client that fails
// it gets the reason and the connection closes.
func (s *Server) authenticate(r *bufio.Reader, w *bufio.Writer) (string, error) {
	k := s.opt.Kerberos
	m, err := readSASL(r)
	if err != nil {
		return "", err
	}
	if m.GetState() != common.RpcSaslProto_NEGOTIATE {
		s.refuse(w, saslCallID, exSasl, "expected NEGOTIATE, got "+m.GetState().String())
		return "", errors.New("no NEGOTIATE")
	}
	protocol, serverID := k.saslServerID()
	krbAuth := &common.RpcSaslProto_SaslAuth{
		Method:    proto.String("KERBEROS"),
		Mechanism: proto.String("GSSAPI"),
		Protocol:  proto.String(protocol),
		ServerId:  proto.String(serverID),
	}
	if err := writeSASL(w, &common.RpcSaslProto{State: common.RpcSaslProto_NEGOTIATE.Enum(), Auths: []*common.RpcSaslProto_SaslAuth{krbAuth}}); err != nil {
		return "", err
	}
	if m, err = readSASL(r); err != nil {
		return "", err
	}
	if m.GetState() != common.RpcSaslProto_INITIATE {
		s.refuse(w, saslCallID, exSasl, "expected INITIATE, got "+m.GetState().String())
		return "", errors.New("no INITIATE")
	}
	var tok spnego.KRB5Token
	if err := tok.Unmarshal(m.GetToken()); err != nil || !tok.IsAPReq() {
		s.refuse(w, saslCallID, exSasl, fmt.Sprintf("GSS initiate failed: not a Kerberos AP-REQ (%v)", err))
		return "", errors.New("bad initiate token")
	}
	ok, creds, err := service.VerifyAPREQ(&tok.APReq, service.NewSettings(k.Keytab, service.KeytabPrincipal(k.Principal), service.DecodePAC(false)))
	if err != nil || !ok {
		s.refuse(w, saslCallID, exSasl, fmt.Sprintf("GSS initiate failed for %s: %v", k.Principal, err))
		return "", fmt.Errorf("AP-REQ: %v", err)
	}
	key := tok.APReq.Ticket.DecryptedEncPart.Key
	// The challenge offers the security layers and buffer size (RFC 4752
	// 3.1); the client's answer is checked only for integrity, since
	// "authentication" is the one layer offered.
	challenge, err := acceptorWrapToken([]byte{saslLayerNone, 0, 0, maxSASLBufferSize}, key)
	if err != nil {
		return "", err
	}
	if err := writeSASL(w, &common.RpcSaslProto{State: common.RpcSaslProto_CHALLENGE.Enum(), Token: challenge}); err != nil {
		return "", err
	}
	if m, err = readSASL(r); err != nil {
		return "", err
	}
	var resp gssapi.WrapToken
	if err := resp.Unmarshal(m.GetToken(), false); err != nil {
		s.refuse(w, saslCallID, exSasl, "bad GSSAPI response: "+err.Error())
		return "", err
	}
	if ok, err := resp.Verify(key, keyusage.GSSAPI_INITIATOR_SEAL); !ok {
		s.refuse(w, saslCallID, exSasl, fmt.Sprintf("GSSAPI response does not verify: %v", err))
		return "", errors.New("bad response")
	}
	if err := writeSASL(w, &common.RpcSaslProto{State: common.RpcSaslProto_SUCCESS.Enum()}); err != nil {
		return "", err
	}
	return creds.UserName() + "@" + creds.Domain(), nil
}

// acceptorWrapToken is a GSSAPI wrap token from the acceptor, checksummed
// with key.
func acceptorWrapToken(payload []byte, key types.EncryptionKey) ([]byte, error) {
	t, err := gssapi.NewInitiatorWrapToken(payload, key)
	if err != nil {
		return nil, err
	}
	t.Flags = 0x01 // sent by the acceptor
	t.CheckSum = nil
	if err := t.SetCheckSum(key, keyusage.GSSAPI_ACCEPTOR_SEAL); err != nil {
		return nil, err
	}
	return t.Marshal()
}

// shortName maps a principal to its user, as Hadoop's default
// auth_to_local rule does: the first component.
func shortName(principal string) string {
	name, _, _ := strings.Cut(principal, "@")
	name, _, _ = strings.Cut(name, "/")
	return name
}

// LoadKerberos reads the NameNode's keytab and checks that it holds keys
// for principal ("nn/HOST@REALM").
func LoadKerberos(keytabFile, principal string) (*Kerberos, error) {
	name, realm, ok := strings.Cut(principal, "@")
	if !ok || name == "" || realm == "" || !strings.Contains(name, "/") {
		return nil, fmt.Errorf("--principal %q: want the NameNode's service principal, like nn/HOST@REALM", principal)
	}
	kt, err := keytab.Load(keytabFile)
	if err != nil {
		return nil, fmt.Errorf("reading keytab %s: %v", keytabFile, err)
	}
	pn, _ := types.ParseSPNString(name)
	found := false
	for _, e := range kt.Entries {
		if e.Principal.Realm == realm && strings.Join(e.Principal.Components, "/") == strings.Join(pn.NameString, "/") {
			found = true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("keytab %s has no key for %s (kadmin: ktadd -k %s %s)", keytabFile, principal, keytabFile, principal)
	}
	return &Kerberos{Keytab: kt, Principal: principal}, nil
}
