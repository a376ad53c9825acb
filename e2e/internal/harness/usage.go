package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// CPUSeconds is the user and system CPU the process pid has used.
func CPUSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name may hold spaces; the fields after ") " are fixed.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// ControlPlaneCPU is the CPU time, in seconds, of the kube-apiserver and
// etcd processes this process started (its descendants of those names).
func ControlPlaneCPU(t *testing.T) float64 {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	var sum float64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "kube-apiserver", "etcd":
		default:
			continue
		}
		if descendsFrom(pid, self) {
			sum += CPUSeconds(t, pid)
		}
	}
	return sum
}

// descendsFrom reports whether pid is a descendant of ancestor.
func descendsFrom(pid, ancestor int) bool {
	for i := 0; i < 32 && pid > 1; i++ {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
		ppid, _ := strconv.Atoi(fields[1])
		if ppid == ancestor {
			return true
		}
		pid = ppid
	}
	return false
}

// PeakRSS is the process's high-water resident set size in bytes.
func PeakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb * 1024
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// AnonSampler samples a process's anonymous resident memory (RssAnon: its
// heap, stacks and runtime data, not the pages of its binary, which every
// process of the same executable on a node shares in the page cache) and
// keeps the largest sample: the kernel keeps a high-water mark of the
// whole resident set only (VmHWM).
type AnonSampler struct {
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

// SampleAnon samples pid's RssAnon every 200 ms until Stop.
func SampleAnon(pid int) *AnonSampler {
	s := &AnonSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, ok := StatusBytes(pid, "RssAnon:"); ok && v > s.peak.Load() {
				s.peak.Store(v)
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// Peak is the largest RssAnon sampled so far, in bytes.
func (s *AnonSampler) Peak() int64 { return s.peak.Load() }

// Stop ends the sampling (the process may be gone) and returns Peak.
func (s *AnonSampler) Stop() int64 {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	return s.Peak()
}

// StatusBytes reads a "Key:   N kB" line of /proc/pid/status in bytes.
func StatusBytes(pid int, key string) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, key) {
			kb, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
