package httpapi

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// reloading is what load makes of files, made again when they change
// (their sizes and modification times, looked at once a second at most).
// A load that fails — a file half written, a pair of files one of which
// is new — keeps the last good value, and is tried again.
type reloading[T any] struct {
	files  []string
	load   func() (T, error)
	logger *slog.Logger

	mu      sync.Mutex
	value   T
	stamp   string // of the files value was loaded from
	checked time.Time
}

func newReloading[T any](logger *slog.Logger, load func() (T, error), files ...string) (*reloading[T], error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rl := &reloading[T]{files: files, load: load, logger: logger}
	stamp, err := rl.stampNow()
	if err == nil {
		rl.value, err = load()
	}
	if err != nil {
		return nil, err
	}
	rl.stamp, rl.checked = stamp, time.Now()
	return rl, nil
}

func (rl *reloading[T]) stampNow() (string, error) {
	var b strings.Builder
	for _, f := range rl.files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%d@%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

// get is the value of the files as they are now, or were last good.
func (rl *reloading[T]) get() T {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if time.Since(rl.checked) < time.Second {
		return rl.value
	}
	rl.checked = time.Now()
	stamp, err := rl.stampNow()
	if err != nil || stamp == rl.stamp {
		return rl.value
	}
	v, err := rl.load()
	if err != nil {
		// Not the error: a parser's error may quote what it read, a key's
		// bytes among it.
		rl.logger.Warn("httpapi: changed files do not load; the last good ones stay in use", "files", rl.files)
		return rl.value
	}
	rl.value, rl.stamp = v, stamp
	rl.logger.Info("httpapi: reloaded", "files", rl.files)
	return rl.value
}
