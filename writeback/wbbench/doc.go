// Package wbbench exercises the write path against the real protocol
// emulators: a benchmark of checkpoint writes through an output mount
// (checkpoint_test.go), fault-injection tests against the OSS emulator
// (oss_faults_test.go) and a run against the HDFS emulator (hdfs_test.go).
// It has no library code.
package wbbench
