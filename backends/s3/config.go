package s3

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// credentials are an access key pair and an optional session token. They
// are never logged, formatted or written anywhere: String hides them.
type credentials struct {
	id, secret, token string
}

func (c credentials) String() string { return "credentials{redacted}" }

// GoString hides the secret from %#v as well.
func (c credentials) GoString() string { return c.String() }

// loadCredentials returns the key a URI's profile names, from the
// credentials file (file, else $AWS_SHARED_CREDENTIALS_FILE); without a
// profile, it reads the credentials file when one is given, otherwise
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
func loadCredentials(file, profile string) (credentials, error) {
	if profile != "" {
		if file == "" {
			file = os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
		}
		if file == "" {
			return credentials{}, fmt.Errorf("the URI names S3 profile %q: pass --s3-credentials-file (or set AWS_SHARED_CREDENTIALS_FILE) with a [%s] section", profile, profile)
		}
		return readCredentialsFile(file, profile, true)
	}
	if file != "" {
		return readCredentialsFile(file, os.Getenv("AWS_PROFILE"), false)
	}
	c := credentials{
		id:     os.Getenv("AWS_ACCESS_KEY_ID"),
		secret: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		token:  os.Getenv("AWS_SESSION_TOKEN"),
	}
	if c.id == "" || c.secret == "" {
		return credentials{}, errors.New("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), or pass --s3-credentials-file")
	}
	return c, nil
}

// readCredentialsFile parses an AWS shared credentials file (INI sections
// of aws_access_key_id, aws_secret_access_key and aws_session_token; the
// section named by profile, else [default]) or an env file
// (AWS_ACCESS_KEY_ID=... lines, outside any section); strict: only the
// named profile will do. A file that group or others may read is refused,
// as ssh refuses a private key.
func readCredentialsFile(path, profile string, strict bool) (credentials, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return credentials{}, fmt.Errorf("S3 credentials file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return credentials{}, fmt.Errorf("S3 credentials file %s is accessible by group or others (mode %04o): run chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	f, err := os.Open(path)
	if err != nil {
		return credentials{}, fmt.Errorf("S3 credentials file: %w", err)
	}
	defer f.Close()
	if profile == "" {
		profile = "default"
	}
	var top, want credentials
	section, found := "", false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			section = strings.TrimSpace(strings.Trim(line, "[]"))
			section = strings.TrimSpace(strings.TrimPrefix(section, "profile "))
			found = found || section == profile
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		var c *credentials
		switch section {
		case "":
			c = &top
		case profile:
			c = &want
		default:
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "aws_access_key_id", "access_key_id", "accesskeyid":
			c.id = v
		case "aws_secret_access_key", "secret_access_key", "secretaccesskey":
			c.secret = v
		case "aws_session_token", "session_token", "sessiontoken":
			c.token = v
		}
	}
	if err := sc.Err(); err != nil {
		return credentials{}, fmt.Errorf("S3 credentials file %s: %w", path, err)
	}
	if strict && !found {
		return credentials{}, fmt.Errorf("S3 credentials file %s has no profile [%s]", path, profile)
	}
	c := top
	if found {
		c = want
	}
	if c.id == "" || c.secret == "" {
		return credentials{}, fmt.Errorf("S3 credentials file %s: want aws_access_key_id and aws_secret_access_key in profile [%s] (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY lines)", path, profile)
	}
	return c, nil
}

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
