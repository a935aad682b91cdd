// Package browser drives Debian's Chromium, headless, for tests of the web
// console: a fresh profile for each browser, the flags this project runs
// Chromium with, every JavaScript error the page raises counted, and
// screenshots kept under the repository's .cache/console/.
//
// A test that needs a browser calls New: without Chromium it is skipped,
// or fails under CI (CI=true), which installs Debian's chromium.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Browser is one headless Chromium with one tab.
type Browser struct {
	tb     testing.TB
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// Path finds Chromium: $OXBOW_CHROMIUM, else chromium on the PATH.
func Path() (string, error) {
	if p := os.Getenv("OXBOW_CHROMIUM"); p != "" {
		return p, nil
	}
	return exec.LookPath("chromium")
}

// New starts Chromium for the test, closed when it ends.
func New(tb testing.TB) *Browser {
	tb.Helper()
	path, err := Path()
	if err != nil {
		msg := "needs Chromium (Debian's chromium package; .ci/run installs it): " + err.Error()
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &Browser{tb: tb, ctx: ctx}
	// Start the browser now, so that a failure to is the test's first.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		tb.Fatalf("start Chromium (%s): %v", path, err)
	}
	// The page's console, read until the test ends: uncaught exceptions
	// and console.error calls are errors; the browser's own log (a
	// refused request, say) is not the page's doing.
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError && m.Source == "" {
				b.addError(m.String())
			}
		}
	}()
	tb.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-done
	})
	return b
}

func (b *Browser) addError(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, s)
}

// Errors are the JavaScript errors the pages raised so far: uncaught
// exceptions and console.error calls.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// Run runs actions in the tab, failing the test on an error, each run
// bounded by a minute.
func (b *Browser) Run(actions ...chromedp.Action[chromedp.Void]) {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.tb.Fatalf("browser: %v (JavaScript errors so far: %q)", err, b.Errors())
	}
}

// Until waits for the JavaScript expression to be true in the page, or
// fails the test after timeout, saying what it waited for and what the
// page shows.
func (b *Browser) Until(what, expr string, timeout time.Duration) {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	ok, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil || !ok {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(document.getElementById("page") || document.body).innerText`))
		b.tb.Fatalf("browser: %s: not within %v (%v); the page says:\n%s", what, timeout, err, text)
	}
}

// Eval evaluates the JavaScript expression in b's page.
func Eval[T any](b *Browser, expr string) T {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.tb.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// Screenshot keeps a picture of the whole page as
// .cache/console/<name>.png in the repository, and returns its path.
func (b *Browser) Screenshot(name string) string {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG; below, JPEG
	if err != nil {
		b.tb.Fatalf("browser: screenshot: %v", err)
	}
	dir, err := cacheDir()
	if err != nil {
		b.tb.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.tb.Fatal(err)
	}
	return path
}

// cacheDir is .cache/console/ at the module's root, made if missing.
func cacheDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("browser: no go.mod above the working directory")
		}
		dir = parent
	}
	out := filepath.Join(dir, ".cache", "console")
	return out, os.MkdirAll(out, 0o755)
}
