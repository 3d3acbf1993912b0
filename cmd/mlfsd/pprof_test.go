package main

import "testing"

func TestPprofAddrLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:6060": true,
		"[::1]:6060":     true,
		"localhost:0":    true,
		"0.0.0.0:6060":   false,
		":6060":          false,
		"10.1.2.3:6060":  false,
		"example.com:80": false,
		"127.0.0.1":      false, // no port
	} {
		if err := checkPprofAddr(addr); (err == nil) != ok {
			t.Errorf("checkPprofAddr(%q) = %v, want accepted %v", addr, err, ok)
		}
	}
}
