package ratelimit

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"

	"github.com/pgadmit/pgadmit/internal/runecut"
)

// maxHolderHostBytes bounds the host part of a default holder, in bytes: with the pid and the
// random part it stays well within MaxScopeBytes, the bound of a holder given in
// AllotmentOptions.Holder.
const maxHolderHostBytes = 200

// newHolder names a process's holder of allotments (AllotmentOptions.Holder left empty) and one
// run's holder of a maintenance lease: host, process id and a random part (see holderName).
func newHolder() string {
	var b [6]byte
	_, _ = rand.Read(b[:])   // never fails (crypto/rand since Go 1.24)
	host, _ := os.Hostname() // "" on failure: holderName says unknown-host
	return holderName(host, os.Getpid(), b[:])
}

// holderName is host/pid/random, random in hex. The host is made text PostgreSQL stores (its NUL
// bytes dropped, invalid UTF-8 replaced), cut to maxHolderHostBytes bytes, never inside a
// character, and is "unknown-host" when nothing is left of it.
func holderName(host string, pid int, random []byte) string {
	host = runecut.Text(host, maxHolderHostBytes)
	if host == "" {
		host = "unknown-host"
	}
	return host + "/" + strconv.Itoa(pid) + "/" + hex.EncodeToString(random)
}
