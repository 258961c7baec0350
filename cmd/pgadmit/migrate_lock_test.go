package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// migrate up on a database that is current says so at once while another migrator holds the
// lock row, as status and version answer then: it has nothing to apply, and reads the version
// it prints without the lock. It read it with goose's GetDBVersion, which takes the lock: it
// waited for it, silent (its progress lines had stopped), for up to the locker's 5 minutes, and
// then failed.
func TestMigrateUpOnACurrentDatabaseTakesNoLock(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t) // migrated to the latest version
	versions, err := migrationVersions()
	if err != nil {
		t.Fatal(err)
	}
	_, unlock := pgtest.AnotherMigrator(t, context.Background(), url)
	t.Cleanup(func() { _ = unlock() })
	stdout, stderr, exited := startMigrate(t, url, "up")
	select {
	case code := <-exited:
		want := fmt.Sprintf("nothing to do\nschema version %d\n", versions[len(versions)-1])
		if code != exitOK || stdout.String() != want || stderr.String() != "" {
			t.Errorf("migrate up on a current database: exit %d, stdout %q, stderr %q; want exit 0, stdout %q", code, stdout.String(), stderr.String(), want)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("migrate up on a current database still runs after 15s while another migrator holds the lock; stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}
