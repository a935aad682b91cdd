//go:build cgo && linux

package cmalloc

/*
#include <malloc.h>

// oxbow_arena_max sets glibc's M_ARENA_MAX; 0 where the C library has no
// such setting (musl).
static int oxbow_arena_max(int n) {
#ifdef M_ARENA_MAX
	return mallopt(M_ARENA_MAX, n);
#else
	return 0;
#endif
}
*/
import "C"

func setArenaMax(n int) bool {
	return C.oxbow_arena_max(C.int(n)) == 1
}
