package migrate

// Load is load, for the tests of the rules a set of migrations keeps.
var Load = load

// Base is what 0001 makes, as checkBase reads it from its SQL: the
// tables, their columns, the indexes.
func Base(d Dialect) (tables []string, columns map[string][]string, indexes map[string]string) {
	b := bases()[d]
	return b.tables, b.columns, b.indexes
}
