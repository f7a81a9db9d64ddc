package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the Go collector's GOGC that factoryd serve runs with
// unless GOGC is set in its environment. The API's reads by id allocate
// little, but at thousands of requests per second a process that also holds
// the embedded Temporal server (tens of MB of live heap to mark) collects
// several times a second at Go's default of 100, and the requests that run
// while it marks make the latency tail. 200 lets the heap grow to three
// times the live heap instead of twice before a collection: half as many
// collections, for about 50% more heap (README, "Performance").
const defaultGCPercent = 200

// setGCPercent applies defaultGCPercent, unless GOGC is set: then the Go
// runtime has applied it already and it stands (as GOMEMLIMIT does, which
// factoryd never sets).
func setGCPercent() {
	if os.Getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(defaultGCPercent)
}
