package graph

// gqlgen's executable schema and models, from ../gqlgen.yml (after ent's
// generation has written ent/ent.graphql).
//go:generate go tool gqlgen
