package ent

// The ent client and ent.graphql, from ./schema; gqlgen follows in
// graph/generate.go, genqlient in internal/cli/gen.go. `go generate ./...`
// runs them in that order (the packages' order), and the test
// TestGeneratedCodeIsFresh fails when what is committed is stale.
//go:generate go -C .. run -mod=mod ./ent/entc.go
