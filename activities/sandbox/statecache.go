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

// A command's end is recorded in memory (Local.active) on every command and
// in the state file only when the time stored there is activeWrite old:
// writing the file on every command cost about half a millisecond of a
// step. Every load of this driver (Get, Reap, Exec) sees the later of the
// two, so lifecycle decisions are exact; the file may lag by less than
// activeWrite, which a restarted worker sees (its sandboxes' commands died
// with the one before).

// activeWrite is how old the state file's last_active_at may get while
// commands run in the sandbox.
const activeWrite = time.Second

// touch records that a command of sandbox name ended now.
func (l *Local) touch(name string) {
	now := l.Now().UTC()
	l.stmu.Lock()
	if now.After(l.active[name]) {
		l.active[name] = now
	}
	e, ok := l.states[name]
	fresh := ok && e.sb.LastActiveAt.After(now.Add(-activeWrite))
	l.stmu.Unlock()
	if fresh {
		return
	}
	if cur, err := l.load(name); err == nil { // with now as its last activity
		_ = l.save(cur)
	}
}

// withActive gives sb the last activity recorded in memory when that is
// later than its own; l.stmu is held.
func (l *Local) withActive(sb Sandbox) Sandbox {
	if t, ok := l.active[sb.Name]; ok && t.After(sb.LastActiveAt) {
		sb.LastActiveAt = t
	}
	return sb
}

// forget drops what the driver keeps of a sandbox that no longer exists.
func (l *Local) forget(name string) {
	l.stmu.Lock()
	defer l.stmu.Unlock()
	delete(l.states, name)
	delete(l.active, name)
}

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
	return l.withActive(cloneSandbox(e.sb)), true
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
