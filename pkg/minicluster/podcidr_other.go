//go:build unix && !linux

package minicluster

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lockPodRange holds a pod range with an flock on a file named after it in
// the temporary directory; the kernel drops the lock when the process dies.
// Only Linux routes all of 127.0.0.0/8 to lo: elsewhere pod IPs are unique
// but nothing can listen on them without an alias on the loopback
// interface.
func lockPodRange(prefix netip.Prefix) (io.Closer, error) {
	dir := filepath.Join(os.TempDir(), "openmed-minicluster-pod-cidrs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	name := strings.ReplaceAll(prefix.String(), "/", "_") + ".lock"
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errPodRangeTaken
		}
		return nil, err
	}
	return f, nil
}
