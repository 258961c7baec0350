package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/peterldowns/pgtestdb"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/process"
)

var (
	clusterMu sync.Mutex
	running   *pgcluster.Cluster // the started cluster (stopCluster stops it)

	// clusterStartup is how long startCluster took; pgtest's own tests report it.
	clusterStartup time.Duration
)

// startCluster starts the throwaway cluster of this test process (package pgcluster: a fresh
// cluster on 127.0.0.1 at a free port, durability off, in /dev/shm when it can) and returns how
// to reach it. The cluster is stopped by stopCluster, or when the process is interrupted,
// terminated or hung up on.
func startCluster() (pgtestdb.Config, error) {
	c, err := pgcluster.Start(context.Background())
	if errors.Is(err, pgcluster.ErrNoPostgres) {
		return pgtestdb.Config{}, fmt.Errorf("%w; a DATABASE_URL role must be allowed to create roles and databases", err)
	}
	if err != nil {
		return pgtestdb.Config{}, err
	}
	clusterMu.Lock()
	running = c
	clusterMu.Unlock()
	stopOnSignal()
	clusterStartup = c.Startup()

	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       pgcluster.Host,
		Port:       strconv.Itoa(c.Port()),
		User:       pgcluster.User,
		Database:   pgcluster.Database,
		Options:    "sslmode=disable",
	}, nil
}

// stopCluster stops the throwaway cluster, if one runs, and removes its directory. It is safe
// to call more than once and from several goroutines, and returns only once that is done, even
// when another call does it (the signal handler's and Main's, when an interrupt also ends m.Run):
// a call that returned at once would let the process exit halfway through the removal.
func stopCluster() {
	clusterMu.Lock()
	c := running
	clusterMu.Unlock()
	if c != nil {
		_ = c.Stop() // Stop runs once; a concurrent call waits for it
	}
}

// stopOnSignal stops the cluster when the process is interrupted, terminated or hung up on
// (SIGHUP, unless ignored: nohup), then lets the signal take its default course.
func stopOnSignal() {
	sigs := pgcluster.StopSignals()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	go func() {
		sig := <-ch
		stopCluster()
		signal.Reset(sigs...)
		process.Raise(sig)
		// The default action normally ends the process before this (off Unix, nothing is raised).
		time.Sleep(time.Second)
		os.Exit(1)
	}()
}

// OwnCluster starts a throwaway cluster for t alone (a test that needs its own server settings,
// or to crash it) and stops it when t ends. Where this machine has no PostgreSQL binaries, t is
// skipped when DATABASE_URL names a server (the rest of the suite runs there), and fails
// otherwise.
func OwnCluster(t testing.TB, opts ...pgcluster.Option) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), opts...)
	if errors.Is(err, pgcluster.ErrNoPostgres) && os.Getenv("DATABASE_URL") != "" {
		t.Skipf("this test needs a cluster of its own: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}
