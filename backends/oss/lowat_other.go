//go:build !linux

package oss

import "net"

const lowatSupported = false

func newLowatConn(c net.Conn) net.Conn { return c }
