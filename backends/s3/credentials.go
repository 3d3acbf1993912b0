package s3

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/mlfsd/mlfsd/backends/objstore"
)

// ChainSources names, in the order the AWS SDK's default chain tries
// them, the sources of the backend's keys when none is given.
const ChainSources = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN], the shared config and credentials files (~/.aws/config, ~/.aws/credentials or --s3-credentials-file; AWS_PROFILE or the URI's profile=) with their static keys, role_arn, web_identity_token_file, sso_session and credential_process, web identity (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE: IRSA), container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI / _RELATIVE_URI: EKS Pod Identity, ECS), EC2 instance metadata (IMDSv2)"

// expiryWindow is how long before their expiry short-lived keys are
// renewed: a request signed with a key a few seconds from its end may
// spend those seconds in a queue or on the wire.
const expiryWindow = 10 * time.Second

// newCredentials returns the provider the backend signs with: the given
// one, else the AWS SDK's default chain (ChainSources) for profile (a
// URI's profile=, else AWS_PROFILE), reading opt.CredentialsFile instead
// of ~/.aws/credentials when set. Keys are cached and renewed
// expiryWindow before they expire. It returns where the keys come from,
// for errors.
func newCredentials(ctx context.Context, opt Options, region, profile string) (aws.CredentialsProvider, string, error) {
	if opt.CredentialsProvider != nil {
		return opt.CredentialsProvider, "the given credentials provider", nil
	}
	source := "the AWS default chain"
	lo := []func(*config.LoadOptions) error{
		config.WithRegion(region),
		config.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = expiryWindow }),
	}
	if f := opt.CredentialsFile; f != "" {
		if err := objstore.CheckSecretFile("S3", f); err != nil {
			return nil, "", err
		}
		lo = append(lo, config.WithSharedCredentialsFiles([]string{f}))
		source += " with credentials file " + f
	}
	if profile != "" {
		lo = append(lo, config.WithSharedConfigProfile(profile))
		source += ", profile " + profile
	}
	lo = append(lo, opt.loadOptions...)
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, "", fmt.Errorf("S3 credentials from %s: %w", source, err)
	}
	if cfg.Credentials == nil {
		return nil, "", fmt.Errorf("no S3 credentials: %s found no source (%s)", source, ChainSources)
	}
	return cfg.Credentials, source, nil
}

// checkCredentials obtains keys once, so a source that cannot give any
// fails New with its own error rather than the first request with a 403.
// It returns source with the one of the chain that answered.
func checkCredentials(ctx context.Context, p aws.CredentialsProvider, source string) (string, error) {
	c, err := p.Retrieve(ctx)
	if err != nil {
		if s := configuredSource(); s != "" {
			source += ", which the environment points at " + s
		}
		return "", fmt.Errorf("no S3 credentials from %s (the sources, in order: %s): %w", source, ChainSources, err)
	}
	switch c.Source {
	case "":
	case "EnvConfigCredentials":
		source += " (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the environment)"
	default:
		source += " (" + c.Source + ")"
	}
	return source, nil
}

// isExpiredToken tells S3's refusal of an expired session key.
func isExpiredToken(err error) bool {
	_, code := statusOf(err)
	return code == "ExpiredToken" || code == "ExpiredTokenException"
}

// SecretEnv returns the environment variables that hold AWS keys or
// tokens the SDK's chain reads: never for the job's eyes.
func SecretEnv() []string {
	return []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN"}
}

// configuredSource names the source the environment points the chain at,
// for errors: the SDK's own say what failed but often not where.
func configuredSource() string {
	switch {
	case os.Getenv("AWS_ACCESS_KEY_ID") != "":
		return "AWS_ACCESS_KEY_ID"
	case os.Getenv("AWS_ROLE_ARN") != "" && os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE") != "":
		return fmt.Sprintf("web identity (role %s, AWS_WEB_IDENTITY_TOKEN_FILE %s)", os.Getenv("AWS_ROLE_ARN"), os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE"))
	case os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI") != "":
		return "container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI " + redactURL(os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")) + ")"
	case os.Getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") != "":
		return "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)"
	case os.Getenv("AWS_EC2_METADATA_DISABLED") != "true":
		return "EC2 instance metadata (" + firstOf(os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT"), "http://169.254.169.254") + ")"
	}
	return ""
}

// redactURL drops a URL's query and user info, where a token could hide.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
