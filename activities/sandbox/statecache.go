package sandbox

import (
	"maps"
	"os"
	"syscall"
	"time"
)

// The state file of a sandbox is read on every command (Get, Exec) and
// written when it changes. The driver keeps what it last read or wrote of
// each, with the file's identity then (inode, size, modification and change
// times): a load whose stat still matches uses it instead of reading and
// decoding the file again. A file changed behind the driver's back (another
// process on the same root, a restart) no longer matches and is read again.

// stateEntry is a cached state file.
type stateEntry struct {
	sb  Sandbox
	key stateKey
}

// stateKey identifies one version of a state file.
type stateKey struct {
	ino, size    int64
	mtime, ctime time.Time
}

func keyOf(fi os.FileInfo) (stateKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stateKey{}, false
	}
	return stateKey{ino: int64(st.Ino), size: fi.Size(), mtime: fi.ModTime(),
		ctime: time.Unix(st.Ctim.Unix())}, true
}

// cached returns the cached state of name when the file at path is still
// the version cached.
func (l *Local) cached(name string, fi os.FileInfo) (Sandbox, bool) {
	key, ok := keyOf(fi)
	if !ok {
		return Sandbox{}, false
	}
	l.stmu.Lock()
	defer l.stmu.Unlock()
	e, ok := l.states[name]
	if !ok || e.key != key {
		return Sandbox{}, false
	}
	return cloneSandbox(e.sb), true
}

// remember caches sb as the state of name at the file version fi (nil
// forgets it).
func (l *Local) remember(name string, sb Sandbox, fi os.FileInfo) {
	l.stmu.Lock()
	defer l.stmu.Unlock()
	key, ok := stateKey{}, false
	if fi != nil {
		key, ok = keyOf(fi)
	}
	if !ok {
		delete(l.states, name)
		return
	}
	sb.Created = false // not stored: a load never has it
	l.states[name] = stateEntry{sb: cloneSandbox(sb), key: key}
}

// cloneSandbox copies sb so that a caller's changes never reach the cache.
func cloneSandbox(sb Sandbox) Sandbox {
	sb.Env = maps.Clone(sb.Env)
	sb.LimitsApplied = maps.Clone(sb.LimitsApplied)
	if sb.Lifecycle != nil {
		lc := *sb.Lifecycle
		sb.Lifecycle = &lc
	}
	return sb
}
