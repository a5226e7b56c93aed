//go:build tools

package main

// The code generators go generate runs (generate.go, cli/gen.go), so that
// go.mod and go.sum keep what they need: go generate does not tidy
// (gqlgen.yml), and TestGeneratedCodeIsFresh checks that regenerating
// changes neither.
import (
	_ "github.com/99designs/gqlgen"
	_ "github.com/Khan/genqlient"
)
