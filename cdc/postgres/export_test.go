package postgres

// SetAfterChunkRead makes f run between each incremental snapshot chunk's
// read and its window's close, until the returned func is called: what f
// changes is newer than the chunk, in its window.
func SetAfterChunkRead(f func()) (reset func()) {
	old := afterChunkRead
	afterChunkRead = f
	return func() { afterChunkRead = old }
}
