package schema_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// Every table, column and index says, in a COMMENT, why it exists.
var testq = dbtest.New()

func TestEverySchemaObjectHasAComment(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	missing, err := testq.SchemaObjectsWithoutComment(context.Background(), pool)
	if err != nil {
		t.Fatalf("SchemaObjectsWithoutComment: %v", err)
	}
	for _, m := range missing {
		t.Errorf("%s %s has no COMMENT", m.Kind, m.Name)
	}
}
