package main

import "testing"

func TestUcmatose(t *testing.T) {
	*conns, *msgs = 16, 100
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
