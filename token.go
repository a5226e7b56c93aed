package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"taskgraph/app"
	"taskgraph/auth"
)

// runToken prints a new random token and the line to add to a token file
// for it. The file keeps only the token's hash: the token itself is shown
// once, here.
func runToken(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("taskgraph token", flag.ContinueOnError)
	user := fs.String("user", "", "the user the token acts as")
	role := fs.String("role", "operator", "admin, operator or viewer")
	tenant := fs.String("tenant", "", "tenant recorded with the user's actions (optional)")
	hash := fs.Bool("hash", false, "read an existing token on stdin and print only its hash")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return app.ExitOK
		}
		return app.ExitUsage
	}
	if *hash {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 4096))
		if err != nil {
			fmt.Fprintln(os.Stderr, "token:", err)
			return 1
		}
		fmt.Fprintln(out, auth.HashToken(strings.TrimRight(string(b), "\r\n")))
		return 0
	}
	r, err := auth.ParseRole(*role)
	if err != nil {
		fmt.Fprintln(os.Stderr, "token: -role:", err)
		return 2
	}
	if *user == "" || strings.ContainsAny(*user+*tenant, " \t\r\n#") {
		fmt.Fprintln(os.Stderr, "token: -user is required, and -user and -tenant may not contain spaces or #")
		return 2
	}
	tok := auth.NewToken()
	fmt.Fprintf(out, "token: %s\n", tok)
	fmt.Fprintf(out, "line:  %s\n", auth.TokenLine(tok, auth.Viewer{User: *user, Role: r, Tenant: *tenant}))
	fmt.Fprintln(out, "# Add the line to the -token-file; give the token to its user (it is not stored anywhere).")
	return 0
}
