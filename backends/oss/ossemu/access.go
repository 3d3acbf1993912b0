package ossemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// Per-key access rules, as a RAM policy would grant them: which access key
// may list, get or put under which bucket and prefix. Options.Keys adds
// key pairs to the one Options.AccessKeyID names (which may do anything);
// a request signed with one of them passes only what one of its rules
// allows, else it is refused with 403 AccessDenied, as OSS refuses a RAM
// user. Tests use them to say "this key may list the prefix but not read
// it"; `mlfsd emulate oss --access-rules FILE` reads them from a JSON file
// (LoadKeys).

// Action is what a rule allows.
type Action string

// The actions a rule may allow.
const (
	// ActionList lists objects (ListObjects, V1 and V2, and multipart
	// upload listings) with a prefix under the rule's.
	ActionList Action = "list"
	// ActionGet reads an object or its metadata (GetObject, HeadObject,
	// GetObjectMeta, ACL and tags, a symlink's target, a copy's source).
	ActionGet Action = "get"
	// ActionPut writes or deletes an object (PutObject, multipart, append,
	// copy, delete, ACL and tags).
	ActionPut Action = "put"
)

// Key is an access key pair and what it may do.
type Key struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
	// Allow lists what the key may do; nothing is allowed that no rule
	// allows.
	Allow []Rule `json:"allow"`
}

// Rule allows Actions on the objects of Bucket ("" or "*": every bucket)
// whose keys start with Prefix ("": the whole bucket). A listing is
// allowed when its prefix starts with Prefix.
type Rule struct {
	Bucket  string   `json:"bucket"`
	Prefix  string   `json:"prefix"`
	Actions []Action `json:"actions"`
}

// keysFile is the JSON file --access-rules reads: {"keys": [Key...]}.
type keysFile struct {
	Keys []Key `json:"keys"`
}

// LoadKeys reads access keys and their rules from a JSON file:
//
//	{"keys": [{"id": "reader", "secret": "...",
//	           "allow": [{"bucket": "data", "prefix": "train/", "actions": ["list", "get"]}]}]}
func LoadKeys(path string) ([]Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("access rules: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var f keysFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("access rules %s: %w (want {\"keys\": [{\"id\", \"secret\", \"allow\": [{\"bucket\", \"prefix\", \"actions\": [\"list\"|\"get\"|\"put\"]}]}]})", path, err)
	}
	if len(f.Keys) == 0 {
		return nil, fmt.Errorf("access rules %s: no keys", path)
	}
	return f.Keys, nil
}

// checkKeys validates Options.Keys against the primary key id.
func checkKeys(keys []Key, primary string) error {
	seen := map[string]bool{primary: true}
	for _, k := range keys {
		switch {
		case k.ID == "" || k.Secret == "":
			return fmt.Errorf("access key %q: both an id and a secret are required", k.ID)
		case seen[k.ID]:
			return fmt.Errorf("access key %q is given twice (or is the primary key, which may do anything)", k.ID)
		}
		seen[k.ID] = true
		for _, r := range k.Allow {
			if len(r.Actions) == 0 {
				return fmt.Errorf("access key %q: a rule for bucket %q prefix %q allows no action", k.ID, r.Bucket, r.Prefix)
			}
			for _, a := range r.Actions {
				if a != ActionList && a != ActionGet && a != ActionPut {
					return fmt.Errorf("access key %q: unknown action %q (want list, get or put)", k.ID, a)
				}
			}
		}
	}
	return nil
}

// secretOf returns the secret of access key id and its rules (nil for the
// primary key, which may do anything); ok is false for an unknown key.
func (s *Server) secretOf(id string) (secret string, k *Key, ok bool) {
	if id == s.opt.AccessKeyID && s.opt.AccessKeyID != "" {
		return s.opt.AccessKeySecret, nil, true
	}
	for i := range s.opt.Keys {
		if s.opt.Keys[i].ID == id {
			return s.opt.Keys[i].Secret, &s.opt.Keys[i], true
		}
	}
	return "", nil, false
}

// allows reports whether k may do a on bucket/key (for a listing, key is
// its prefix).
func (k *Key) allows(a Action, bucket, key string) bool {
	for _, r := range k.Allow {
		if (r.Bucket == "" || r.Bucket == "*" || r.Bucket == bucket) && strings.HasPrefix(key, r.Prefix) {
			for _, ra := range r.Actions {
				if ra == a {
					return true
				}
			}
		}
	}
	return false
}

// knows reports whether some rule of k names bucket.
func (k *Key) knows(bucket string) bool {
	for _, r := range k.Allow {
		if r.Bucket == "" || r.Bucket == "*" || r.Bucket == bucket {
			return true
		}
	}
	return false
}

// bucketConfig reports whether a GET of a bucket reads its configuration
// rather than listing it.
func bucketConfig(q url.Values) bool {
	for _, p := range []string{"location", "acl", "versioning", "tagging", "policy", "lifecycle", "cors", "bucketInfo", "stat"} {
		if q.Has(p) {
			return true
		}
	}
	return false
}

// errNoRight is what a key without the right is answered, as OSS and S3
// answer a RAM (IAM) user whose policy does not allow the request.
var errNoRight = errors.New("access denied by the key's rules")

// authorize checks a request signed with a ruled key against its rules.
// Requests about the bucket itself (other than listings and reads of its
// configuration) need a rule for the whole bucket.
func (s *Server) authorize(r *http.Request, rc *reqCtx) error {
	k := rc.ruled
	if k == nil {
		return nil
	}
	q := r.URL.Query()
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	var ok bool
	switch {
	case rc.bucket == "":
		ok = true // ListBuckets names buckets only
	case rc.key == "" && read && (r.Method == http.MethodHead || bucketConfig(q)):
		// Whether the bucket exists, its location, ACL, info: any key
		// with a rule for the bucket may ask.
		ok = k.knows(rc.bucket)
	case rc.key == "" && read:
		ok = k.allows(ActionList, rc.bucket, q.Get("prefix"))
	case rc.key == "":
		ok = k.allows(ActionPut, rc.bucket, "")
	case read:
		ok = k.allows(ActionGet, rc.bucket, rc.key)
	default:
		ok = k.allows(ActionPut, rc.bucket, rc.key)
		if src := s.copySource(r, rc); ok && src != "" && r.Method == http.MethodPut {
			b, key, _ := strings.Cut(src, "/")
			ok = k.allows(ActionGet, b, key)
		}
	}
	if !ok {
		return errNoRight
	}
	return nil
}

// refuse answers a request its key's rules do not allow.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.count("AccessDenied")
	msg := "You have no right to access this object because of bucket acl."
	if rc.s3 {
		msg = "Access Denied"
	}
	s.writeError(w, r, rc, http.StatusForbidden, "AccessDenied", msg)
}
