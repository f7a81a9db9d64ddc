package api

import "sync"

// drain lets long-lived responses (followed logs) end when the HTTP server
// shuts down: http.Server.Shutdown waits for every active request, and a
// stream that only ends with its run would hold the shutdown until its
// deadline.
type drain struct {
	once, closeOnce sync.Once
	ch              chan struct{}
}

func (d *drain) done() <-chan struct{} {
	d.once.Do(func() { d.ch = make(chan struct{}) })
	return d.ch
}

// Drain ends the server's open streams (followed logs end with an "end"
// event whose status is "shutting_down"); ordinary requests are unaffected
// and new streams end at once. Call it when shutting down, e.g. with
// http.Server.RegisterOnShutdown(srv.Drain). It is safe to call more than
// once.
func (s *Server) Drain() {
	s.drain.done()
	s.drain.closeOnce.Do(func() { close(s.drain.ch) })
}
