package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// proc identifies one process for good: the pid with its start time, so a
// reused pid is not mistaken for the process seen before.
type proc struct {
	pid   int
	start uint64
	name  string
}

func (p proc) String() string { return fmt.Sprintf("%s (pid %d)", p.name, p.pid) }

// stat reads the parent, state and start time of a process from
// /proc/<pid>/stat.
func stat(pid int) (ppid int, state byte, start uint64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name is in parentheses and may contain spaces; the
	// fields after the last ')' are fixed: state is field 3, ppid 4,
	// starttime 22.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ppid, _ = strconv.Atoi(f[1])
	start, _ = strconv.ParseUint(f[19], 10, 64)
	return ppid, f[0][0], start, nil
}

// cmdName is the base name of a process's executable (argv[0]), which is not
// cut to 15 characters as /proc/<pid>/comm is.
func cmdName(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return "?"
	}
	return filepath.Base(string(bytes.SplitN(data, []byte{0}, 2)[0]))
}

// alive is true when pid runs and is not a zombie. PID 1 of this sandbox
// does not reap orphans, so a process that has exited may stay a zombie; it
// holds no resources and counts as gone.
func alive(pid int) bool {
	_, state, _, err := stat(pid)
	return err == nil && state != 'Z' && state != 'X'
}

// stillRuns is true when p is alive and is the same process that was seen.
func stillRuns(p proc) bool {
	_, state, start, err := stat(p.pid)
	return err == nil && start == p.start && state != 'Z' && state != 'X'
}

// descendants lists the live processes below root.
func descendants(root int) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, _, err := stat(pid); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if _, state, start, err := stat(c); err == nil && state != 'Z' {
				out = append(out, proc{pid: c, start: start, name: cmdName(c)})
			}
			queue = append(queue, c)
		}
	}
	return out
}

// processTracker records every process that ever ran below a root while
// it is sampled.
type processTracker struct {
	mu   sync.Mutex
	seen map[proc]bool
}

func (p *processTracker) sample(root int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[proc]bool{}
	}
	for _, d := range descendants(root) {
		p.seen[d] = true
	}
}

// names lists the distinct executable names seen.
func (p *processTracker) names() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for d := range p.seen {
		out[d.name] = true
	}
	return out
}

// leftovers lists the recorded processes that still run.
func (p *processTracker) leftovers() []proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []proc
	for d := range p.seen {
		if stillRuns(d) {
			out = append(out, d)
		}
	}
	return out
}
