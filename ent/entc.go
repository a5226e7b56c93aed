//go:build ignore

// Command entc generates the ent client and ent.graphql from ent/schema. Run
// it through `go generate ./...` from the repository root.
package main

import (
	"log"

	"taskgraph/ent/entcconfig"

	"entgo.io/ent/entc"
)

func main() {
	cfg, opts, err := entcconfig.Config("./gqlgen.yml", "./ent.graphql", "./ent", "./ent/template")
	if err != nil {
		log.Fatalf("entc: %v", err)
	}
	if err := entc.Generate("./ent/schema", cfg, opts...); err != nil {
		log.Fatalf("entc: running ent codegen: %v", err)
	}
}
