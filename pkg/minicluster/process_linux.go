package minicluster

import "syscall"

// sysProcAttr puts a component in a process group of its own, so Stop can
// signal everything it may have spawned, and has the kernel send it SIGKILL
// when the thread that started it exits: the component dies with this
// process even when it is killed with SIGKILL or panics. Go checks in the
// forked child whether the parent already died, closing the window before the
// signal is armed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
