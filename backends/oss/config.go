package oss

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/mlfsd/mlfsd/backends/objstore"
)

// credentials are an access key pair and an optional STS token. They are
// never logged, formatted or written anywhere: String hides them.
type credentials struct {
	id, secret, token string
}

func (c credentials) String() string { return "credentials{redacted}" }

// GoString hides the secret from %#v as well.
func (c credentials) GoString() string { return c.String() }

// Credentials are an access key pair and an optional STS token given in
// code rather than read from the environment or a file. String, GoString
// and MarshalJSON hide the secret and the token.
type Credentials struct {
	AccessKeyID, AccessKeySecret, SecurityToken string
}

func (c Credentials) String() string { return "oss.Credentials{redacted}" }

// GoString hides the secret from %#v as well.
func (c Credentials) GoString() string { return c.String() }

// MarshalJSON keeps the secret out of JSON (logs); only the key ID shows.
func (c Credentials) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("{%q:%q}", "access_key_id", c.AccessKeyID)), nil
}

// readCredentialsFile parses "key = value" lines (ossutil's config format,
// or an env file): accessKeyID / OSS_ACCESS_KEY_ID, accessKeySecret /
// OSS_ACCESS_KEY_SECRET, stsToken / OSS_SESSION_TOKEN. Sections, comments
// and other keys are ignored. A file that group or others may read is
// refused, as ssh refuses a private key.
func readCredentialsFile(path string) (credentials, error) {
	if err := objstore.CheckSecretFile("OSS", path); err != nil {
		return credentials{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return credentials{}, fmt.Errorf("OSS credentials file: %w", err)
	}
	defer f.Close()
	var c credentials
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "accesskeyid", "access_key_id", "oss_access_key_id":
			c.id = v
		case "accesskeysecret", "access_key_secret", "oss_access_key_secret":
			c.secret = v
		case "ststoken", "securitytoken", "session_token", "oss_session_token":
			c.token = v
		}
	}
	if err := sc.Err(); err != nil {
		return credentials{}, fmt.Errorf("OSS credentials file %s: %w", path, err)
	}
	if c.id == "" || c.secret == "" {
		return credentials{}, fmt.Errorf("OSS credentials file %s: want accessKeyID and accessKeySecret lines (or OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET)", path)
	}
	return c, nil
}

// resolveEndpoint picks the endpoint (the URI's, else the option's, else
// OSS_ENDPOINT) and turns it into a URL. Without a scheme, an IP address or
// localhost gets http:// and path-style addressing (an emulator or a
// private gateway); anything else gets https:// and virtual-hosted style.
func resolveEndpoint(uriEndpoint, optEndpoint string) (endpointURL, host string, pathStyle bool, err error) {
	ep := uriEndpoint
	if ep == "" {
		ep = optEndpoint
	}
	if ep == "" {
		ep = os.Getenv("OSS_ENDPOINT")
	}
	if ep == "" {
		return "", "", false, errors.New("no OSS endpoint: use oss://bucket.endpoint/prefix/, --oss-endpoint, or OSS_ENDPOINT (for example oss-cn-hangzhou.aliyuncs.com)")
	}
	scheme := ""
	host = ep
	if s, rest, ok := strings.Cut(ep, "://"); ok {
		scheme, host = strings.ToLower(s), rest
		if scheme != "http" && scheme != "https" {
			return "", "", false, fmt.Errorf("OSS endpoint %q: scheme must be http or https", ep)
		}
	}
	host = strings.TrimSuffix(host, "/")
	if host == "" || strings.ContainsAny(host, "/?#@ ") {
		return "", "", false, fmt.Errorf("OSS endpoint %q: want a host name with an optional port, like oss-cn-hangzhou.aliyuncs.com", ep)
	}
	hn := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		hn = h
	}
	local := hn == "localhost" || net.ParseIP(strings.Trim(hn, "[]")) != nil
	if scheme == "" {
		scheme = "https"
		if local {
			scheme = "http"
		}
	}
	return scheme + "://" + host, host, local, nil
}
