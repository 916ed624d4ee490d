//go:build !linux

package main

// harden has no equivalent here.
func harden() error { return nil }
