package integration

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks once, before any test, that the services the tests would
// get can be had: with a Docker engine up and no image built, the run stops
// with one message that says how to build it, not a failure per test. It
// removes the process's PostgreSQL container at the end, then fails the
// run if a goroutine outlived the tests.
func TestMain(m *testing.M) {
	// testcontainers-go's reaper would need its image pulled, and no
	// registry may be reachable; the tests remove their containers.
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	if os.Getenv("KAFKA_BROKERS") == "" || os.Getenv("OXBOW_PG_DSN") == "" {
		if _, err := containers(); err != nil {
			fmt.Fprintf(os.Stderr, "integration: a Docker engine answers and KAFKA_BROKERS or OXBOW_PG_DSN is not set, so the tests would run on containers, but:\n%v\n", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if err := removePostgres(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: removing the PostgreSQL container: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
