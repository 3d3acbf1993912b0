package s3

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// endpoint is where the backend sends its requests.
type endpoint struct {
	url       string // "" for AWS S3 itself (the SDK resolves it from the region)
	host      string // host[:port] of url, lower-case ("" for AWS)
	region    string
	pathStyle bool
}

// resolveEndpoint picks the endpoint (the URI's, else the option's, else
// AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS S3), the region
// (URI, option, AWS_REGION, AWS_DEFAULT_REGION, else us-east-1) and the
// addressing style (URI, option; else path style for an endpoint of our
// own, which in-cluster stores serve without wildcard DNS, and
// virtual-hosted style for AWS, which S3 Express directory buckets need).
// An endpoint without a scheme gets http:// when it is an IP address or
// localhost, https:// otherwise.
func resolveEndpoint(uriEP, optEP, uriRegion, optRegion, uriPathStyle, optPathStyle string) (endpoint, error) {
	var e endpoint
	ep := firstOf(uriEP, optEP, os.Getenv("AWS_ENDPOINT_URL_S3"), os.Getenv("AWS_ENDPOINT_URL"))
	e.region = firstOf(uriRegion, optRegion, os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION"), "us-east-1")
	if ep != "" {
		scheme, host := "", ep
		if s, rest, ok := strings.Cut(ep, "://"); ok {
			scheme, host = strings.ToLower(s), rest
			if scheme != "http" && scheme != "https" {
				return e, fmt.Errorf("S3 endpoint %q: scheme must be http or https", ep)
			}
		}
		host = strings.TrimSuffix(host, "/")
		if host == "" || strings.ContainsAny(host, "/?#@ ") {
			return e, fmt.Errorf("S3 endpoint %q: want a host name with an optional port, like minio.storage.svc:9000", ep)
		}
		hn := host
		if h, _, err := net.SplitHostPort(host); err == nil {
			hn = h
		}
		if scheme == "" {
			scheme = "https"
			if hn == "localhost" || net.ParseIP(strings.Trim(hn, "[]")) != nil {
				scheme = "http"
			}
		}
		e.url, e.host, e.pathStyle = scheme+"://"+host, strings.ToLower(host), true
	}
	switch ps := firstOf(uriPathStyle, optPathStyle); ps {
	case "":
	case "true", "false":
		e.pathStyle = ps == "true"
	default:
		return e, fmt.Errorf("S3 path style %q: want true or false (or nothing, to choose by endpoint)", ps)
	}
	return e, nil
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
