package ratelimit_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// ConfigurePool of a nil *pgxpool.Config, or of one not made by
// pgxpool.ParseConfig (no ConnConfig), does nothing: it used to panic. A
// parsed one still gets its handler.
func TestConfigurePoolOfNilConfigDoesNothing(t *testing.T) {
	t.Parallel()
	configure := func(cfg *pgxpool.Config) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panicked: %v", p)
			}
		}()
		ratelimit.ConfigurePool(cfg)
		return nil
	}
	if err := configure(nil); err != nil {
		t.Errorf("ConfigurePool(nil): %v", err)
	}
	zero := &pgxpool.Config{}
	if err := configure(zero); err != nil {
		t.Errorf("ConfigurePool(&pgxpool.Config{}): %v", err)
	}
	if zero.ConnConfig != nil {
		t.Errorf("ConfigurePool(&pgxpool.Config{}) set ConnConfig: %+v", zero.ConnConfig)
	}

	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.BuildContextWatcherHandler = nil
	if err := configure(cfg); err != nil {
		t.Fatalf("ConfigurePool(parsed): %v", err)
	}
	if cfg.ConnConfig.BuildContextWatcherHandler == nil {
		t.Error("ConfigurePool(parsed) set no BuildContextWatcherHandler")
	}
}
