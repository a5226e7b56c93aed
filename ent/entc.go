//go:build ignore

// Command entc generates the ent client and ent.graphql from ent/schema. Run
// it through `go generate ./...` (ent/generate.go), which runs it from the
// repository's root: entgql compares the schema path below with those
// gqlgen.yml lists, relative to that root.
package main

import (
	"log"

	"github.com/taskgraph/taskgraph/ent/entcconfig"

	"entgo.io/ent/entc"
)

func main() {
	cfg, opts, err := entcconfig.Config("./gqlgen.yml", "./ent/ent.graphql", "./ent", "./ent/template")
	if err != nil {
		log.Fatalf("entc: %v", err)
	}
	if err := entc.Generate("./ent/schema", cfg, opts...); err != nil {
		log.Fatalf("entc: running ent codegen: %v", err)
	}
}
