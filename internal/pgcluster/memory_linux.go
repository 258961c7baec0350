package pgcluster

import "syscall"

// Magic numbers of the memory-backed file systems (statfs(2)).
const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// inMemory reports whether dir is on a memory-backed file system (tmpfs, ramfs), where an fsync
// costs nothing.
func inMemory(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	t := uint32(st.Type) // int64 or int32, by architecture
	return t == tmpfsMagic || t == ramfsMagic
}

// freeBytes returns the space free in dir's file system for an unprivileged user, 0 when it
// cannot tell.
func freeBytes(dir string) uint64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	return st.Bavail * uint64(st.Bsize)
}
