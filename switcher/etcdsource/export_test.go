package etcdsource

// SetBeforeWatch makes f run between each read of the key and the start of
// the watch that follows it.
func SetBeforeWatch(s *Source, f func()) { s.beforeWatch = f }
