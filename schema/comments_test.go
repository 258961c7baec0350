package schema_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// Every table, column and index says, in a COMMENT, why it exists.
func TestEverySchemaObjectHasAComment(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	missing, err := db.New().SchemaObjectsWithoutComment(context.Background(), pool)
	if err != nil {
		t.Fatalf("SchemaObjectsWithoutComment: %v", err)
	}
	for _, m := range missing {
		t.Errorf("%s %s has no COMMENT", m.Kind, m.Name)
	}
}
