// Package refreshtest holds TestCredentialsRefreshJob, the oss and s3
// backends' run across three lifetimes of short-lived keys. It takes just
// over three minutes by design, mostly waiting, so it lives alone: `go
// test ./...` runs it beside other packages instead of after the oss
// package's own tests.
package refreshtest
