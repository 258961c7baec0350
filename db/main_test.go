package db_test

import (
	"os"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
