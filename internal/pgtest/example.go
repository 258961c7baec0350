package pgtest

import (
	"fmt"
	"sync"

	"github.com/peterldowns/pgtestdb"
)

// examples holds the one database that a test package's Example functions
// share: they have no *testing.T to ask for their own.
var examples struct {
	once sync.Once
	tb   programTB
	url  string
}

// ExampleURL returns the connection string of a database migrated to
// pgadmit's latest schema, for Example functions. It is made on first use
// and dropped by [Main] after the tests. It panics when no database can be
// made, which fails the example with the reason.
func ExampleURL() string {
	examples.once.Do(func() {
		examples.tb.do(func() {
			if !mainCalled.Load() {
				examples.tb.Fatalf("pgtest: this test package needs func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }")
			}
			base, err := server()
			if err != nil {
				examples.tb.Fatalf("pgtest: %v", err)
			}
			examples.url = pgtestdb.Custom(&examples.tb, base, migrator{}).URL()
		})
	})
	if examples.url == "" {
		panic(fmt.Sprintf("pgtest: no database for examples: %v", examples.tb.err))
	}
	return examples.url
}

// dropExampleDatabase runs the cleanups of the examples' database, if one
// was made.
func dropExampleDatabase() {
	for i := len(examples.tb.cleanups) - 1; i >= 0; i-- {
		examples.tb.do(examples.tb.cleanups[i])
	}
}
