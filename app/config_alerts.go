package app

import (
	"flag"
	"fmt"
	"time"
)

// registerAlertFlags adds the alert evaluator's flags to fs; the function
// it returns checks them once fs is parsed.
func registerAlertFlags(fs *flag.FlagSet, env func(name, def string) string, c *Config) func() error {
	interval := fs.String("alert-interval", env("alert-interval", "2s"), "how often the alert evaluator checks stalls, backlogs and the watchdog's leader, and sends notices held back by a quiet period (task failures are handled as they come)")
	return func() error {
		d, err := time.ParseDuration(*interval)
		if err != nil || d < 100*time.Millisecond || d > time.Hour {
			return fmt.Errorf("-alert-interval: %q is not a duration between 100ms and 1h", *interval)
		}
		c.AlertInterval = d
		return nil
	}
}
