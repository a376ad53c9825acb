package localrun

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Untar writes the directories and regular files of the tar stream r under
// dir, with their permission bits; links and devices are skipped, and no
// name leaves dir (each is cleaned as an absolute path first). It reads a
// `git archive` of this repository or an image's flattened filesystem.
func Untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.Clean("/"+hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFrom(tr, path, os.FileMode(hdr.Mode)&0o777)
		}
		if err != nil {
			return fmt.Errorf("untar %s: %w", hdr.Name, err)
		}
	}
}

func writeFrom(r io.Reader, path string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
