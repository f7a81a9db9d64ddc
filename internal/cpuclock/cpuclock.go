// Package cpuclock reads the CPU time benchmarks compare: less sensitive
// than wall time to what else a shared machine runs. It is imported by
// benchmarks only.
package cpuclock

import "syscall"

// Ms is the CPU time (user and system) this process and its reaped
// children have used, in milliseconds.
func Ms() float64 {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	ms := func(tv syscall.Timeval) float64 { return float64(tv.Sec)*1000 + float64(tv.Usec)/1000 }
	return ms(self.Utime) + ms(self.Stime) + ms(children.Utime) + ms(children.Stime)
}
