package deadserver

import "syscall"

// socket is what syscall.Socket returns: on Windows, a handle.
type socket = syscall.Handle
