package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// diskSize is the size of the file system each processor's data directory
// is mounted on when the profile fills disks: room for its stores under
// the heavy profile several times over.
const diskSize = 256 << 20

// mountSmallDisk mounts a tmpfs of diskSize on dir (needs root: CAP_SYS_ADMIN).
func mountSmallDisk(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", diskSize)); err != nil {
		return fmt.Errorf("mount -t tmpfs -o size=%d tmpfs %s: %w", diskSize, dir, err)
	}
	return nil
}

func unmountSmallDisk(dir string) {
	_ = syscall.Unmount(dir, syscall.MNT_DETACH) // the campaign ends; nothing to do about a failure
}

// fillDisk fills the file system of dir with a file until no byte more
// fits, and returns how many bytes the file took and what frees them.
func fillDisk(dir string) (int64, func(), error) {
	path := filepath.Join(dir, "campaign-filler")
	f, err := os.Create(path)
	if err != nil {
		return 0, nil, err
	}
	free := func() { f.Close(); os.Remove(path) }
	chunk := make([]byte, 1<<20)
	var n int64
	for len(chunk) > 0 {
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			chunk = chunk[:len(chunk)/2] // fill the last bytes too
			continue
		}
		if err != nil {
			free()
			return n, nil, err
		}
	}
	return n, free, nil
}
