// Package pgtest hands a real PostgreSQL server to tests: the one named by
// OXBOW_PG_DSN, as scripts/services.sh prints it (with wal_level=logical),
// else one a registered [Provider] starts (package integration registers a
// container).
// Each test gets a database of its own, dropped with its replication slots
// when the test ends.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oxbow-dev/oxbow/internal/await"
)

// Server is a PostgreSQL server for tests.
type Server struct {
	// DSN connects to it as a superuser that may open replication
	// connections.
	DSN string
	// Restart restarts it, keeping its data. Nil: the server of
	// scripts/services.sh, which `scripts/services.sh restart postgres`
	// restarts.
	Restart func(ctx context.Context) error
}

// Provider finds or starts a server. It returns ok=false, with no error,
// when it does not apply on this machine.
type Provider func(ctx context.Context) (srv Server, ok bool, err error)

var (
	provMu    sync.Mutex
	providers []namedProvider
	// chosen is the process's server, once found; chosenErr the first
	// failure to find one, kept for the rest of the process.
	chosen    *Server
	chosenErr error
)

type namedProvider struct {
	name string
	p    Provider
}

// Register adds a provider, tried in registration order when OXBOW_PG_DSN
// is not set (package integration registers one that starts a container).
func Register(name string, p Provider) {
	provMu.Lock()
	defer provMu.Unlock()
	providers = append(providers, namedProvider{name, p})
}

// server returns the process's server: the one OXBOW_PG_DSN names, else the
// first registered provider's; ok=false when there is none.
func server(ctx context.Context) (srv Server, ok bool, err error) {
	provMu.Lock()
	defer provMu.Unlock()
	switch {
	case chosen != nil:
		return *chosen, true, nil
	case chosenErr != nil:
		return Server{}, false, chosenErr
	}
	if dsn := os.Getenv("OXBOW_PG_DSN"); dsn != "" {
		chosen = &Server{DSN: dsn}
		return *chosen, true, nil
	}
	for _, np := range providers {
		srv, ok, err := np.p(ctx)
		if err != nil {
			chosenErr = fmt.Errorf("pgtest: provider %s: %w", np.name, err)
			return Server{}, false, chosenErr
		}
		if ok {
			chosen = &srv
			return srv, true, nil
		}
	}
	return Server{}, false, nil
}

// ServerDSN is the server's DSN: OXBOW_PG_DSN, else a registered
// provider's. Without a server the test is skipped with the reason, or fails
// when CI=true: CI must run it.
func ServerDSN(tb testing.TB) string {
	tb.Helper()
	return serverFor(tb).DSN
}

func serverFor(tb testing.TB) Server {
	tb.Helper()
	srv, ok, err := server(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if !ok {
		msg := "needs PostgreSQL with wal_level=logical: set OXBOW_PG_DSN (scripts/services.sh start postgres prints it)"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return srv
}

var seq atomic.Int64

// Tests of several packages share the server, and a test may restart it:
// each test holds a shared lock on a file while it has its database, and
// Restart turns its own into an exclusive one, so that no other test is
// using the server meanwhile.
var (
	locksMu sync.Mutex
	locks   = map[testing.TB]*os.File{}
)

func lockPath() string { return filepath.Join(os.TempDir(), "oxbow-pgtest.lock") }

func lockShared(tb testing.TB) {
	f, err := os.OpenFile(lockPath(), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		tb.Fatalf("pgtest: locking %s: %v", lockPath(), err)
	}
	locksMu.Lock()
	locks[tb] = f
	locksMu.Unlock()
	tb.Cleanup(func() {
		locksMu.Lock()
		delete(locks, tb)
		locksMu.Unlock()
		_ = f.Close() // releases the lock
	})
}

// Database creates a database for the test and returns its DSN. When the
// test ends, the database's replication slots (inactive by then: stop what
// streams from them first, in an earlier Cleanup or before returning) and
// the database are dropped.
func Database(tb testing.TB) string {
	tb.Helper()
	admDSN := ServerDSN(tb)
	lockShared(tb)
	name := fmt.Sprintf("oxbow_test_%d_%d", time.Now().UnixNano()%1_000_000_000, seq.Add(1))
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, admDSN)
	if err != nil {
		tb.Fatalf("pgtest: connecting to %s: %v", admDSN, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		admin, err := pgx.Connect(ctx, admDSN)
		if err != nil {
			tb.Errorf("pgtest: dropping %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		// Tried again while a walsender is still going away.
		if err := await.Within(30*time.Second, func() error {
			_, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
			return err
		}); err != nil {
			tb.Errorf("pgtest: dropping the slots of %s: %v", name, err)
			return
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: dropping %s: %v", name, err)
		}
	})
	u, err := url.Parse(admDSN)
	if err != nil {
		tb.Fatalf("pgtest: the server DSN is not a URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// Exec runs statements on a database, failing the test on an error.
func Exec(tb testing.TB, dsn string, sql ...string) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range sql {
		if _, err := conn.Exec(ctx, s); err != nil {
			tb.Fatalf("pgtest: %s: %v", s, err)
		}
	}
}

// Restart restarts the server, keeping its data (its provider's Restart, or
// scripts/services.sh restart postgres): every connection is dropped. It
// waits for the tests of other packages that use the server to finish, and
// keeps them from starting, until the server is back. Call it from a test
// that has a Database.
func Restart(tb testing.TB) {
	tb.Helper()
	locksMu.Lock()
	f := locks[tb]
	locksMu.Unlock()
	if f == nil {
		tb.Fatal("pgtest: Restart from a test without a Database")
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		tb.Fatalf("pgtest: locking %s: %v", lockPath(), err)
	}
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_SH) }()
	if srv := serverFor(tb); srv.Restart != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := srv.Restart(ctx); err != nil {
			tb.Fatalf("pgtest: restarting the server: %v", err)
		}
		return
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "services.sh")
	out, err := exec.Command("bash", script, "restart", "postgres").CombinedOutput()
	if err != nil {
		tb.Fatalf("pgtest: restarting the server: %v\n%s", err, strings.TrimSpace(string(out)))
	}
}

// Secured is a database of a test's on the secured side of the server
// scripts/services.sh starts, owned by its role oxbow_secure, which may
// connect only over TLS (verify-full) with its scram-sha-256 password.
type Secured struct {
	// DSN connects as oxbow_secure, without the password, which is in
	// PasswordFile; AdminDSN connects to the same database as the test's
	// superuser.
	DSN, PasswordFile, AdminDSN string
}

// SecureDatabase makes a database for the test as Database does, and
// hands it to oxbow_secure; it skips the test (fails it when CI=true)
// without OXBOW_PG_SECURE_DSN and OXBOW_SECURE_DIR (`scripts/services.sh
// env`).
func SecureDatabase(tb testing.TB) Secured {
	tb.Helper()
	secure, dir := os.Getenv("OXBOW_PG_SECURE_DSN"), os.Getenv("OXBOW_SECURE_DIR")
	if secure == "" || dir == "" {
		msg := "needs the secured PostgreSQL of scripts/services.sh: eval \"$(scripts/services.sh env)\""
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	admin := Database(tb)
	au, err := url.Parse(admin)
	if err != nil {
		tb.Fatal(err)
	}
	name := strings.TrimPrefix(au.Path, "/")
	Exec(tb, admin, "ALTER DATABASE "+name+" OWNER TO oxbow_secure")
	su, err := url.Parse(secure)
	if err != nil {
		tb.Fatalf("pgtest: OXBOW_PG_SECURE_DSN is not a URL: %v", err)
	}
	su.Path = "/" + name
	return Secured{DSN: su.String(), PasswordFile: filepath.Join(dir, "oxbow_secure.password"), AdminDSN: admin}
}
