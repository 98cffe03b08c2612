//go:build pibgw_cabi

package main

import (
	"os"
	ossignal "os/signal"
	"runtime"
	"syscall"
)

// With PIBGW_DEBUG_STACKS set, SIGQUIT makes the library write the stacks of all its
// goroutines to stderr (and the program carries on), as a Go program does on SIGQUIT: a
// C program that hangs in a verb can be asked where. Without it, SIGQUIT keeps its
// default action, as for any C program (the Go runtime of a c-shared library installs no
// handler for asynchronous signals).
func init() {
	if os.Getenv("PIBGW_DEBUG_STACKS") == "" {
		return
	}
	ch := make(chan os.Signal, 1)
	ossignal.Notify(ch, syscall.SIGQUIT)
	go func() {
		buf := make([]byte, 4<<20)
		for range ch {
			n := runtime.Stack(buf, true)
			os.Stderr.Write(buf[:n])
		}
	}()
}
