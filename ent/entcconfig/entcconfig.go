// Package entcconfig is the single description of how the ent client and
// ent.graphql are generated, shared by ent/entc.go and by the test that fails
// when the committed generated code is stale.
package entcconfig

import (
	"fmt"

	"entgo.io/contrib/entgql"
	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"
)

// Config returns the codegen configuration writing the ent package to target
// and the GraphQL schema to schemaPath, reading gqlgen's configuration from
// gqlgenPath and extra templates from templateDir.
func Config(gqlgenPath, schemaPath, target, templateDir string) (*gen.Config, []entc.Option, error) {
	ex, err := entgql.NewExtension(
		entgql.WithConfigPath(gqlgenPath),
		entgql.WithSchemaGenerator(),
		entgql.WithSchemaPath(schemaPath),
		entgql.WithWhereInputs(true),
		entgql.WithNodeDescriptor(false),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("creating entgql extension: %w", err)
	}
	cfg := &gen.Config{
		Target:  target,
		Package: "github.com/taskgraph/taskgraph/ent",
		Features: []gen.Feature{
			gen.FeatureGlobalID,
			gen.FeatureExecQuery,
			gen.FeatureModifier,
			gen.FeatureLock,
			// Query interceptors: package access filters every read by
			// the viewer in the context.
			gen.FeatureIntercept,
		},
	}
	return cfg, []entc.Option{entc.Extensions(ex), entc.TemplateDir(templateDir)}, nil
}
