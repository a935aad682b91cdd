// Package javabuild builds the repository's Java modules — the reference
// implementations that tests run beside Oxbow (Kafka Streams' side of
// engine/difftest, Debezium's of cdc/postgres, the registry serdes'
// interop) — with Maven into the repository's .cache/m2, and gives the
// classpath to run them with.
package javabuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// ErrNoJava is the error of a build on a machine without java or mvn.
var ErrNoJava = errors.New("javabuild: java and mvn are needed to build and run the Java side")

// Root is the repository's root: the nearest directory above the working
// directory (a test's is its package's) that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("javabuild: no go.mod above the working directory")
		}
		dir = up
	}
}

var (
	mu    sync.Mutex
	built = map[string]string{} // module → classpath, once per process
)

// Classpath compiles the Maven module at module (a directory relative to
// the repository's root, holding pom.xml) and resolves its dependencies,
// once per process; it returns the classpath that runs its classes. A
// build takes at most ctx's time.
func Classpath(ctx context.Context, module string) (string, error) {
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", ErrNoJava
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if cp, ok := built[module]; ok {
		return cp, nil
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, module)
	build := exec.CommandContext(ctx, "mvn", "-q", "-B", "-Dmaven.repo.local="+filepath.Join(root, ".cache", "m2"),
		"-f", filepath.Join(dir, "pom.xml"), "compile", "dependency:build-classpath", "-Dmdep.outputFile=target/classpath.txt")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("javabuild: building %s (mvn compile): %w\n%s", module, err, out)
	}
	deps, err := os.ReadFile(filepath.Join(dir, "target", "classpath.txt"))
	if err != nil {
		return "", err
	}
	cp := filepath.Join(dir, "target", "classes") + string(os.PathListSeparator) + strings.TrimSpace(string(deps))
	built[module] = cp
	return cp, nil
}

// ForTest is Classpath for a test: without java or mvn it skips the test,
// or fails it under CI (CI=true), where the reference must run; a failed
// build fails it.
func ForTest(tb testing.TB, ctx context.Context, module string) string {
	tb.Helper()
	cp, err := Classpath(ctx, module)
	switch {
	case errors.Is(err, ErrNoJava):
		msg := fmt.Sprintf("needs java and mvn for the Java side (%s)", module)
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	case err != nil:
		tb.Fatal(err)
	}
	return cp
}
