package postgres

// Commits returns the transactions s's writer has committed (for the
// benchmarks' commits/op figure).
func Commits(s *Store) int64 { return s.w.commits.Load() }
