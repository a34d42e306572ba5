package pull

// admit takes a place for a request of subscription id, false past the
// bounds; release gives it back.
func (s *Server) admit(id string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= s.cfg.MaxRequests || s.busy[id] >= s.cfg.MaxRequestsPerSubscription {
		return nil, false
	}
	s.total++
	s.busy[id]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.total--
		if s.busy[id]--; s.busy[id] == 0 {
			delete(s.busy, id)
		}
	}, true
}
