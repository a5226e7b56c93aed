package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/taskgraph/taskgraph/internal/auth"
)

// runToken prints a new random token and the line to add to a token file
// for it. The file keeps only the token's hash: the token itself is shown
// once, here. It needs no server.
func runToken(env *Env, args []string) int {
	c := &cmd{name: "token", about: "Makes a random bearer token and prints it with the line to add to the server's --token-file (which keeps only its hash); with --hash, prints the hash of a token read on stdin.", env: env,
		fs: flag.NewFlagSet("taskgraph token", flag.ContinueOnError)}
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {}
	user := c.fs.String("user", "", "the user the token acts as")
	role := c.fs.String("role", "operator", "admin, operator or viewer")
	tenant := c.fs.String("tenant", "", "tenant recorded with the user's actions (optional)")
	hash := c.fs.Bool("hash", false, "read an existing token on stdin and print only its hash")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		if *hash {
			b, err := io.ReadAll(io.LimitReader(env.Stdin, 4096))
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(env.Stdout, auth.HashToken(strings.TrimRight(string(b), "\r\n")))
			return err
		}
		r, err := auth.ParseRole(*role)
		if err != nil {
			return usageErrorf("--role: %v", err)
		}
		if *user == "" || strings.ContainsAny(*user+*tenant, " \t\r\n#") {
			return usageErrorf("--user is required, and --user and --tenant may not contain spaces or #")
		}
		tok := auth.NewToken()
		fmt.Fprintf(env.Stdout, "token: %s\n", tok)
		fmt.Fprintf(env.Stdout, "line:  %s\n", auth.TokenLine(tok, auth.Viewer{User: *user, Role: r, Tenant: *tenant}))
		_, err = fmt.Fprintln(env.Stdout, "# Add the line to the --token-file; give the token to its user (it is not stored anywhere).")
		return err
	}())
}
