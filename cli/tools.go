//go:build tools

package cli

// The generator of generated.go, so that go.mod and go.sum keep what
// `go generate ./cli/` needs (TestGeneratedCodeIsFresh checks they do).
import _ "github.com/Khan/genqlient"
