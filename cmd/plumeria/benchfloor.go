package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/plumeria-fs/plumeria/bench/fsbench"
	"github.com/plumeria-fs/plumeria/frontend/fuse"
	"github.com/plumeria-fs/plumeria/frontend/fuse/memfs"
)

// floorMount is the FUSE floor of `plumeria bench DIR --floor`: an
// in-memory file system (frontend/fuse/memfs) served through the adapter
// with a real mount's options, on a temporary directory. What the
// workloads achieve there is what FUSE itself allows.
type floorMount struct {
	dir string
	srv *fuse.Server
}

// floorUnmountWait bounds the wait for the kernel to let go of the floor.
const floorUnmountWait = 30 * time.Second

// floorReady says what the floor lacks here, if anything: root (it mounts
// with mount(2)), a usable /dev/fuse, and memory for the largest data the
// workloads of cfg keep at once (memfs holds it all).
func floorReady(cfg fsbench.Config) error {
	var missing []string
	if uid := os.Geteuid(); uid != 0 {
		missing = append(missing, fmt.Sprintf("root (running as uid %d)", uid))
	}
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		missing = append(missing, fmt.Sprintf("/dev/fuse (%v; load the fuse module: modprobe fuse; a container needs --device /dev/fuse)", err))
	} else {
		f.Close()
	}
	if len(missing) > 0 {
		return fmt.Errorf("bench --floor mounts a FUSE file system and needs %s", strings.Join(missing, " and "))
	}
	avail, ok := memAvailable()
	if !ok {
		return nil
	}
	need, flag := floorBytes(cfg)
	if need > avail/2 {
		return fmt.Errorf("bench --floor keeps its files in memory: %s holds %s at once, over half of the %s available; lower it",
			flag, humanBytes(need), humanBytes(avail))
	}
	return nil
}

// floorBytes is about the most data the floor holds at once, and the flag
// that sets it: each workload's files are removed before the next.
func floorBytes(cfg fsbench.Config) (int64, string) {
	const inodeBytes = 512 // memfs's own cost of a small file, roughly
	need, flag := int64(cfg.Files)*(int64(cfg.FileSize)+inodeBytes), "--files × --file-size"
	for _, w := range []struct {
		n    int64
		flag string
	}{
		{cfg.SeqSize, "--seq-size"},
		{cfg.RandSize, "--rand-size"},
		{int64(cfg.TreeFiles) * (16<<10 + inodeBytes), "--tree-files"}, // ~16 KiB a file (fsbench.GenTree)
	} {
		if w.flag == "--rand-size" && cfg.RandOps == 0 {
			continue
		}
		if w.n > need {
			need, flag = w.n, w.flag
		}
	}
	return need, flag
}

// memAvailable reads MemAvailable from /proc/meminfo (Linux).
func memAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		v, ok := strings.CutPrefix(s.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return kib << 10, err == nil
	}
	return 0, false
}

// mountFloor mounts a fresh floor on a new temporary directory.
func mountFloor() (*floorMount, error) {
	dir, err := os.MkdirTemp("", "plumeria-floor-")
	if err != nil {
		return nil, fmt.Errorf("bench --floor: %w", err)
	}
	srv, err := fuse.Mount(dir, memfs.New(), fuse.Options{Volume: "floor", CacheTimeout: kernelCacheDefault})
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("bench --floor: %w", err)
	}
	return &floorMount{dir: dir, srv: srv}, nil
}

// unmount unmounts the floor, waits for the kernel to let go of it, and
// removes its directory.
func (m *floorMount) unmount() error {
	if err := m.srv.Unmount(); err != nil {
		return fmt.Errorf("bench --floor: %w", err)
	}
	gone := make(chan struct{})
	go func() { m.srv.Wait(); close(gone) }()
	select {
	case <-gone:
	case <-time.After(floorUnmountWait):
		return fmt.Errorf("bench --floor: %s still in use %v after it was unmounted", m.dir, floorUnmountWait)
	}
	if err := os.Remove(m.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("bench --floor: %w", err)
	}
	return nil
}
