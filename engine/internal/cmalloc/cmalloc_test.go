package cmalloc

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestLimit: on Linux with cgo (glibc, as here and in CI) the bound is set,
// and a second call keeps the first one's answer.
func TestLimit(t *testing.T) {
	if os.Getenv("MALLOC_ARENA_MAX") != "" {
		if Limit() {
			t.Fatal("Limit set the bound over MALLOC_ARENA_MAX in the environment")
		}
		return
	}
	want := runtime.GOOS == "linux" && cgoEnabled && glibc()
	if got := Limit(); got != want {
		t.Fatalf("Limit() = %v, want %v", got, want)
	}
	if got := Limit(); got != want {
		t.Fatalf("second Limit() = %v, want %v", got, want)
	}
}

// glibc reports whether the process runs on glibc: its dynamic loader
// is the one mapped.
func glibc() bool {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false
	}
	return strings.Contains(string(maps), "libc.so.6")
}
