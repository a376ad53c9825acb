package minicluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// launcher starts processes from one goroutine locked to its OS thread.
// Linux sends the parent-death signal when the *thread* that forked a child
// exits, not the process, and the Go runtime may end an idle thread; a thread
// that stays locked until every child is stopped cannot go away early.
type launcher struct {
	reqs chan func()
}

func newLauncher() *launcher {
	l := &launcher{reqs: make(chan func())}
	go func() {
		// Never unlocked: when close ends this goroutine, the runtime ends
		// the thread with it, which also kills any child still alive.
		runtime.LockOSThread()
		for req := range l.reqs {
			req()
		}
	}()
	return l
}

// close ends the launcher's thread. Only call it once every child is gone.
func (l *launcher) close() {
	close(l.reqs)
}

// process is one running component.
type process struct {
	name    Component
	cmd     *exec.Cmd
	logPath string
	// done is closed once the process has exited and been reaped; err then
	// holds how it exited.
	done chan struct{}
	err  error
}

// start launches bin with args, its output appended to logPath.
func (l *launcher) start(name Component, bin string, args, env []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	// The child gets its own copy of the descriptor.
	defer logFile.Close()

	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	errc := make(chan error, 1)
	l.reqs <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// StartChild starts cmd so that it cannot outlive this process: in a
// process group of its own (Linux: with SIGKILL as its parent-death signal),
// forked from a goroutine locked to its OS thread until the child has
// exited. Linux sends the parent-death signal when the forking *thread*
// ends; an unlocked thread goes back to the runtime's pool, where another
// goroutine may lock it and end it, killing the child long before this
// process ends. The channel yields cmd.Wait's result once the child has
// been reaped.
func StartChild(cmd *exec.Cmd) (<-chan error, error) {
	attr := sysProcAttr()
	if cmd.SysProcAttr != nil {
		// The caller's user and groups, if it chose them.
		attr.Credential = cmd.SysProcAttr.Credential
	}
	cmd.SysProcAttr = attr
	started := make(chan error, 1)
	waited := make(chan error, 1)
	go func() {
		// Never unlocked: the runtime retires the thread with this
		// goroutine, once the child is gone.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return waited, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes an unexpected exit, with the end of the log so the
// cause is visible without opening the file.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", p.name, p.err, p.logPath, tail(p.logPath, 15))
}

// stop sends SIGTERM to the process group, then SIGKILL once timeout has
// passed, and waits until the process is reaped. A zero timeout kills at once.
func (p *process) stop(timeout time.Duration) error {
	pgid := p.cmd.Process.Pid
	if timeout > 0 && !p.exited() {
		if err := signalGroup(pgid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("stop %s: %w", p.name, err)
		}
		select {
		case <-p.done:
		case <-time.After(timeout):
		}
	}
	// Never signal the group of a process already reaped: its id is free
	// again, and a new process group may have taken it.
	if !p.exited() {
		if err := signalGroup(pgid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill %s: %w", p.name, err)
		}
	}
	<-p.done
	return nil
}

// signalGroup signals every process in the group; an empty group is fine.
func signalGroup(pgid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// tail returns the last n lines of the file at path, or why it cannot.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.ReplaceAll(string(bytes.Join(lines, []byte("\n"))), "\n", "\n  ")
}

// childEnv is this process's environment for a component. etcd and kwok read
// settings from ETCD_* and KWOK_* variables, so those are dropped: a shell
// that has them set must not change the cluster. extra is added last.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ETCD_") || strings.HasPrefix(kv, "KWOK_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
