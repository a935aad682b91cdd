package oxbowtest

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// PostgresOptions tune [RunPostgres] and [Postgres].
type PostgresOptions struct {
	// Image is the server's image. Default: OXBOW_POSTGRES_IMAGE, else
	// [PostgresImage].
	Image string
	// Database is the database created at start. Default: "oxbow".
	Database string
	// Password is the password of the user postgres. Default: "oxbow".
	Password string
	// Settings are server settings ("max_connections": "50") given to
	// postgres as -c name=value. The image always sets wal_level=logical.
	Settings map[string]string
	// StartTimeout bounds the start. Default: [DefaultStartTimeout].
	StartTimeout time.Duration
}

// PostgresContainer is a running PostgreSQL server.
type PostgresContainer struct {
	// DSN connects to the database as the superuser postgres, which may also
	// open replication connections:
	// postgres://postgres:PASSWORD@127.0.0.1:PORT/DATABASE?sslmode=disable.
	DSN string
	// Container is the testcontainers-go container.
	Container *testcontainers.DockerContainer
}

// Terminate stops and removes the container.
func (p *PostgresContainer) Terminate(ctx context.Context) error {
	return p.Container.Terminate(ctx)
}

// Restart stops the server (a fast shutdown: every connection is dropped)
// and starts it again on the same port with its data, and returns when it
// takes connections.
func (p *PostgresContainer) Restart(ctx context.Context) error {
	timeout := 30 * time.Second
	if err := p.Container.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("oxbowtest: stopping PostgreSQL: %w", err)
	}
	if err := p.Container.Start(ctx); err != nil {
		return fmt.Errorf("oxbowtest: starting PostgreSQL again: %w", err)
	}
	return pgAnswers(ctx, p.DSN)
}

// Postgres starts a PostgreSQL server for a test and removes it when the
// test ends. Without a Docker engine it skips the test (fails it when
// CI=true); any other failure, a missing image among them, fails the test.
func Postgres(tb testing.TB, opts PostgresOptions) *PostgresContainer {
	tb.Helper()
	p, err := RunPostgres(context.Background(), opts)
	if err != nil {
		forTest(tb, err)
	}
	tb.Cleanup(func() {
		if err := testcontainers.TerminateContainer(p.Container); err != nil {
			tb.Errorf("oxbowtest: removing the PostgreSQL container: %v", err)
		}
	})
	return p
}

// RunPostgres starts a PostgreSQL server with wal_level=logical in a
// container on the host's network and returns once it takes connections.
// The caller terminates it.
func RunPostgres(ctx context.Context, opts PostgresOptions) (*PostgresContainer, error) {
	image := orEnv(opts.Image, "OXBOW_POSTGRES_IMAGE", PostgresImage)
	db := orEnv(opts.Database, "", "oxbow")
	password := orEnv(opts.Password, "", "oxbow")
	ctx, cancel := context.WithTimeout(ctx, cmpDuration(opts.StartTimeout, DefaultStartTimeout))
	defer cancel()
	var cmd []string
	for k, v := range opts.Settings {
		cmd = append(cmd, "-c", k+"="+v)
	}
	env := func(ports []int) map[string]string {
		return map[string]string{
			"PGPORT":            strconv.Itoa(ports[0]),
			"POSTGRES_DB":       db,
			"POSTGRES_PASSWORD": password,
		}
	}
	dsn := func(port int) string {
		u := url.URL{
			Scheme:   "postgres",
			User:     url.UserPassword("postgres", password),
			Host:     fmt.Sprintf("127.0.0.1:%d", port),
			Path:     "/" + db,
			RawQuery: "sslmode=disable",
		}
		return u.String()
	}
	ready := func(ctx context.Context, c *testcontainers.DockerContainer, ports []int) error {
		if err := wait.ForLog("database system is ready to accept connections").WithStartupTimeout(DefaultStartTimeout).WaitUntilReady(ctx, c); err != nil {
			return err
		}
		return pgAnswers(ctx, dsn(ports[0]))
	}
	c, ports, err := run(ctx, image, 1, env, cmd, ready)
	if err != nil {
		return nil, err
	}
	return &PostgresContainer{DSN: dsn(ports[0]), Container: c}, nil
}

// pgAnswers waits until the server takes a connection and a query.
func pgAnswers(ctx context.Context, dsn string) error {
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("PostgreSQL does not take connections: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
