//go:build unix && !linux

package minicluster

import "syscall"

// sysProcAttr puts a component in a process group of its own, so Stop can
// signal everything it may have spawned. Only Linux has a parent-death
// signal; elsewhere a component outlives a parent that is killed with
// SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
