package bench

import "testing"

// TestLocalDSN: the bench reads PostgreSQL's CPU only for a server on this
// machine: a loopback address, localhost or a Unix socket, in a URL or a
// key=value DSN.
func TestLocalDSN(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]bool{
		"postgres://u:p@127.0.0.1:5432/db?sslmode=disable":    true,
		"postgres://u@localhost/db":                           true,
		"postgres://u@[::1]:5433/db":                          true,
		"postgres:///db?host=/var/run/postgresql":             true,
		"postgres:///db":                                      true,
		"host=127.0.0.2 dbname=db":                            true,
		"dbname=db user=u":                                    true,
		"postgres://u@db.example.com:5432/db":                 false,
		"postgres://u@10.0.0.7/db":                            false,
		"postgres://u@127.0.0.1/db?host=db.example.com":       false,
		"host=db.internal port=5432 dbname=db sslmode=verify": false,
	} {
		if got := localDSN(dsn); got != want {
			t.Errorf("localDSN(%q) = %v, want %v", dsn, got, want)
		}
	}
}
