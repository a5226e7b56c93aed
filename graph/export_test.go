package graph

// WhereQueries is how many changes subscriptions confirmed with a query.
func WhereQueries() int64 { return whereQueries.Load() }
