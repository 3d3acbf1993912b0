package backends

import (
	"net"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// A data identity names the data a backend serves, not how it is reached:
// an output channel's write-back staging is keyed by it, so a restart after
// a crash finds the pending uploads when the same store is reached under
// another name. What counts as the same store:
//
//   - OSS on Alibaba Cloud: the region, bucket and prefix. The public
//     (oss-REGION.aliyuncs.com), internal (oss-REGION-internal.aliyuncs.com),
//     old VPC (vpc100-oss-REGION.aliyuncs.com) and dual-stack
//     (REGION.oss.aliyuncs.com) endpoints of one region reach the same
//     bucket, in the host or in the bucket.endpoint form PAI prints. An
//     acceleration endpoint (oss-accelerate*.aliyuncs.com) reaches a bucket
//     of any region: it matches every region (bucket names are unique
//     across Alibaba Cloud, so that cannot join two stores).
//   - OSS elsewhere (an emulator, an S3-compatible store): the endpoint
//     host:port as given, bucket and prefix. Nothing tells whether two such
//     endpoints serve the same data, and uploading one store's files to
//     another would be worse than reporting them (Store reports pending
//     files of other identities at start).
//   - HDFS: the path and the cluster, named by every name it was reached
//     by: the nameservice, the NameNode hosts (ports dropped: a NameNode on
//     a new port is the same cluster) and their addresses. Two HDFS
//     identities are the same store when they share the path and one name:
//     an HA nameservice and one of its NameNodes, an HA pair and one of its
//     NameNodes, a NameNode by its name and by its address.
//
// An identity is one line of text, so it can be kept in a file and compared
// by SameStore.

// DataIdentifier is implemented by backends that know a better name for
// their data than the address in their ID (an HDFS cluster's nameservice
// and NameNode addresses). Optional: without it the identity is derived
// from ID by IdentityOfID.
type DataIdentifier interface {
	DataID() string
}

// DataIdentity names the data b serves, independent of its endpoint. A
// decorator (metrics, limits) is looked through (As).
func DataIdentity(b Backend) string {
	if d, ok := As[DataIdentifier](b); ok {
		return d.DataID()
	}
	return IdentityOfID(b.ID())
}

// IdentityOfID derives a data identity from a backend ID (a channel URI).
// IDs that are not URIs are their own identity.
func IdentityOfID(id string) string {
	u, err := ParseURI(id)
	if err != nil {
		return id
	}
	switch u.Scheme {
	case SchemeOSS:
		return OSSIdentity(u.Bucket, u.Path, u.Endpoint)
	case SchemeHDFS:
		return HDFSIdentity(u.Hosts, u.Path)
	}
	return u.String()
}

// OSSIdentity is the identity of a bucket prefix reached at endpoint (a
// host with an optional port, or "" when unknown).
func OSSIdentity(bucket, path, endpoint string) string {
	base := (URI{Scheme: SchemeOSS, Bucket: bucket, Path: path}).String()
	if endpoint == "" {
		return base
	}
	if region, ok := AliyunRegion(endpoint); ok {
		return base + " aliyun:" + region
	}
	return base + " endpoint:" + strings.TrimSuffix(strings.ToLower(endpoint), ".")
}

// aliyunAccelerate stands for the acceleration endpoints' "any region".
const aliyunAccelerate = "accelerate"

var (
	// oss-cn-hangzhou.aliyuncs.com, oss-cn-hangzhou-internal.aliyuncs.com,
	// vpc100-oss-cn-hangzhou.aliyuncs.com
	aliyunRegional = regexp.MustCompile(`^(?:vpc100-)?oss-([a-z0-9-]+?)(?:-internal)?\.aliyuncs\.com$`)
	// cn-hangzhou.oss.aliyuncs.com (dual stack)
	aliyunDualStack = regexp.MustCompile(`^([a-z0-9-]+)\.oss(?:-internal)?\.aliyuncs\.com$`)
)

// AliyunRegion returns the region of an Alibaba Cloud OSS endpoint (host,
// optional port), "accelerate" for an acceleration endpoint, and false for
// any other endpoint.
func AliyunRegion(endpoint string) (string, bool) {
	host := endpoint
	if h, _, err := net.SplitHostPort(endpoint); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "oss-accelerate.aliyuncs.com" || host == "oss-accelerate-overseas.aliyuncs.com" {
		return aliyunAccelerate, true
	}
	if m := aliyunRegional.FindStringSubmatch(host); m != nil {
		return m[1], true
	}
	if m := aliyunDualStack.FindStringSubmatch(host); m != nil {
		return m[1], true
	}
	return "", false
}

// HDFSIdentity is the identity of path on the HDFS cluster known by names
// (nameservices, NameNode hosts with or without ports, addresses): the
// names lower-cased, without ports, sorted and deduplicated.
func HDFSIdentity(names []string, path string) string {
	set := map[string]bool{}
	for _, n := range names {
		if h, _, err := net.SplitHostPort(n); err == nil {
			n = h
		}
		n = strings.TrimSuffix(strings.ToLower(strings.Trim(n, "[]")), ".")
		if n != "" {
			set[n] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return SchemeHDFS + "://" + strings.Join(out, ",") + (&url.URL{Path: path}).EscapedPath()
}

// SameStore reports whether two data identities name the same data (see
// the rules above). An OSS identity without an endpoint (written by an
// earlier version, which dropped it) matches every endpoint of its bucket
// and prefix, as that version did.
func SameStore(a, b string) bool {
	if a == b {
		return true
	}
	switch {
	case strings.HasPrefix(a, SchemeOSS+"://") && strings.HasPrefix(b, SchemeOSS+"://"):
		baseA, whereA, _ := strings.Cut(a, " ")
		baseB, whereB, _ := strings.Cut(b, " ")
		if baseA != baseB {
			return false
		}
		if whereA == "" || whereB == "" {
			return true
		}
		ra, okA := strings.CutPrefix(whereA, "aliyun:")
		rb, okB := strings.CutPrefix(whereB, "aliyun:")
		return okA && okB && (ra == rb || ra == aliyunAccelerate || rb == aliyunAccelerate)
	case strings.HasPrefix(a, SchemeHDFS+"://") && strings.HasPrefix(b, SchemeHDFS+"://"):
		namesA, pathA := splitHDFSIdentity(a)
		namesB, pathB := splitHDFSIdentity(b)
		if pathA != pathB {
			return false
		}
		for _, n := range namesA {
			for _, m := range namesB {
				if n == m {
					return true
				}
			}
		}
	}
	return false
}

func splitHDFSIdentity(id string) (names []string, path string) {
	rest := strings.TrimPrefix(id, SchemeHDFS+"://")
	authority, path := rest, "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	for _, n := range strings.Split(authority, ",") {
		if n != "" {
			names = append(names, n)
		}
	}
	return names, path
}
