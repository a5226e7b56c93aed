package pgdsn

import (
	"errors"
	"testing"
)

func TestSetKeepsTheForm(t *testing.T) {
	for _, tc := range []struct{ dsn, key, value, want string }{
		{"host=127.0.0.1 dbname=test sslmode=disable", "application_name", "taskgraph-relay-n1", "host=127.0.0.1 dbname=test sslmode=disable application_name=taskgraph-relay-n1"},
		{"host=/var/run/postgresql dbname=test", "search_path", "tg_1", "host=/var/run/postgresql dbname=test search_path=tg_1"},
		{"host = 127.0.0.1  dbname='my db'", "application_name", "a b", `host=127.0.0.1 dbname='my db' application_name='a b'`},
		{"host=h application_name=old", "application_name", "new", "host=h application_name=new"},
		{`password='it\'s' host=h`, "x", `back\slash`, `password='it\'s' host=h x='back\\slash'`},
		{"postgres://u@127.0.0.1:5432/test?sslmode=disable", "application_name", "n", "postgres://u@127.0.0.1:5432/test?application_name=n&sslmode=disable"},
		{"postgres:///test?host=/var/run/postgresql", "search_path", "s", "postgres:///test?host=%2Fvar%2Frun%2Fpostgresql&search_path=s"},
	} {
		got, err := Set(tc.dsn, tc.key, tc.value)
		if err != nil || got != tc.want {
			t.Errorf("Set(%q, %q, %q) = %q, %v; want %q", tc.dsn, tc.key, tc.value, got, err, tc.want)
		}
		if v := Get(got, tc.key); v != tc.value {
			t.Errorf("Get(%q, %q) = %q, want %q", got, tc.key, v, tc.value)
		}
	}
}

func TestWithDefaultKeepsTheUsersValue(t *testing.T) {
	for _, dsn := range []string{"host=h application_name=mine", "postgres://h/db?application_name=mine"} {
		got, err := WithDefault(dsn, "application_name", "ours")
		if err != nil || got != dsn {
			t.Errorf("WithDefault(%q) = %q, %v; want it unchanged", dsn, got, err)
		}
	}
}

func TestGetReadsURLParts(t *testing.T) {
	dsn := "postgres://bob:secret@db.example:6543/shop?sslmode=require"
	for key, want := range map[string]string{"host": "db.example", "port": "6543", "user": "bob", "password": "secret", "dbname": "shop", "sslmode": "require", "jit": ""} {
		if got := Get(dsn, key); got != want {
			t.Errorf("Get(%q) = %q, want %q", key, got, want)
		}
	}
	if got := Get("postgres:///shop?host=/tmp", "host"); got != "/tmp" {
		t.Errorf("socket host = %q", got)
	}
}

func TestRedact(t *testing.T) {
	for dsn, want := range map[string]string{
		"host=h password='a b' dbname=d": "host=h password=xxxxx dbname=d",
		"postgres://u:pw@h/d":            "postgres://u:xxxxx@h/d",
		"postgres://u@h/d?password=pw":   "postgres://u@h/d?password=xxxxx",
		"host=h dbname='unterminated":    "(unparsable DSN)",
	} {
		if got := Redact(dsn); got != want {
			t.Errorf("Redact(%q) = %q, want %q", dsn, got, want)
		}
	}
}

func TestWhere(t *testing.T) {
	for dsn, want := range map[string]string{
		"host=127.0.0.1 dbname=test":             "127.0.0.1:5432",
		"host=/var/run/postgresql port=5433":     "/var/run/postgresql/.s.PGSQL.5433",
		"postgres://u@[::1]:5439/d":              "[::1]:5439",
		"postgres:///d?host=/var/run/postgresql": "/var/run/postgresql/.s.PGSQL.5432",
	} {
		if got := Where(dsn); got != want {
			t.Errorf("Where(%q) = %q, want %q", dsn, got, want)
		}
	}
}

func TestBadKeyValueIsATypedError(t *testing.T) {
	for _, dsn := range []string{"host", "host=h dbname='x", "=v"} {
		if _, err := Set(dsn, "k", "v"); !errors.Is(err, ErrSyntax) {
			t.Errorf("Set(%q): %v, want ErrSyntax", dsn, err)
		}
	}
}
