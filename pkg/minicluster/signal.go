package minicluster

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// StopOnSignal stops the cluster when the process receives one of sigs
// (SIGINT and SIGTERM when none are given), then raises the signal again with
// its default action, so a command-line tool ends on Ctrl-C the usual way,
// with exit status 130, and leaves no component and no temporary directory
// behind. The components sit in process groups of their own, so the
// terminal's Ctrl-C never reaches them directly.
//
// It replaces any other handler for those signals when it fires; a program
// with a shutdown of its own should instead cancel the context it passes to
// Start and call Stop itself. release stops watching for the signals.
func (c *Cluster) StopOnSignal(sigs ...os.Signal) (release func()) {
	if len(sigs) == 0 {
		sigs = []os.Signal{os.Interrupt, syscall.SIGTERM}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	quit := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			_ = c.Stop()
			// On Unix every os.Signal is a syscall.Signal.
			s := sig.(syscall.Signal)
			signal.Reset(s)
			_ = syscall.Kill(os.Getpid(), s)
			// The signal is delivered asynchronously; if its default action
			// does not end the process after all, exit the way a shell
			// reports a death by that signal.
			time.Sleep(time.Second)
			os.Exit(128 + int(s))
		case <-quit:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(quit)
	}
}
