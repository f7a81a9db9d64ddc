// Package testwait is how tests wait for something: they poll a condition
// until a deadline instead of sleeping for a while and hoping. It is
// imported by tests only.
package testwait

import "time"

// Tick is how often Until checks its condition.
const Tick = 20 * time.Millisecond

// Until calls cond in the caller's goroutine (so cond may fail the test or
// keep what it saw) right away and then every Tick, until it is true or
// limit has passed; it tells whether cond became true.
func Until(limit time.Duration, cond func() bool) bool {
	return UntilEvery(limit, Tick, cond)
}

// UntilEvery is Until checking every tick (for a condition that is costly
// to check, such as a call to a server).
func UntilEvery(limit, tick time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		<-t.C
	}
}
