package csidriver

import (
	"regexp"
	"strings"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/mlfsd/mlfsd/backends"
)

// uriInText finds URI-like tokens in free text (a path, an ID, an error).
var uriInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://[^\s"'\\<>]*`)

// redactString hides the credentials of every URI-like token in s.
func redactString(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return uriInText.ReplaceAllStringFunc(s, backends.RedactURI)
}

// redactRequest formats a CSI request for the log with nothing secret in
// it: the fields the spec marks csi_secret are stripped (protosanitizer);
// in every other string map (volume attributes, StorageClass parameters,
// publish context) a value is kept only under a key mlfsd knows (uri,
// mode, a mount option, a kubelet key), others are hidden, since a user
// may put a key where an attribute goes; and the credentials of every URI
// in any string (the uri attribute, the volume ID, a path) are hidden.
func redactRequest(req any) string {
	m, ok := req.(proto.Message)
	if !ok {
		return redactString(protosanitizer.StripSecrets(req).String())
	}
	c := proto.Clone(m)
	redactMessage(c.ProtoReflect())
	return redactString(protosanitizer.StripSecrets(c).String())
}

// redactMessage redacts m's string fields in place, recursively.
func redactMessage(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapKey().Kind() != protoreflect.StringKind {
				return true
			}
			mp := m.Mutable(fd).Map()
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				switch fd.MapValue().Kind() {
				case protoreflect.StringKind:
					mp.Set(k, protoreflect.ValueOfString(redactAttribute(k.String(), mv.String())))
				case protoreflect.MessageKind:
					redactMessage(mv.Message())
				}
				return true
			})
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				switch fd.Kind() {
				case protoreflect.StringKind:
					l.Set(i, protoreflect.ValueOfString(redactString(l.Get(i).String())))
				case protoreflect.MessageKind:
					redactMessage(l.Get(i).Message())
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(redactString(v.String())))
		case fd.Kind() == protoreflect.MessageKind:
			redactMessage(v.Message())
		}
		return true
	})
}

// redactAttribute returns the loggable form of one attribute's value.
func redactAttribute(k, v string) string {
	switch {
	case k == AttrURI:
		return redactString(backends.RedactURI(v))
	case k == AttrMode || k == ParamOnDelete || strings.HasPrefix(k, k8sPrefix):
		return redactString(v)
	}
	if _, err := mountOption(k); err == nil {
		return redactString(v)
	}
	return "***"
}
