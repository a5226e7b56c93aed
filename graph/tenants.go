package graph

import "github.com/taskgraph/taskgraph/internal/flow"

// shareOrNil is a tenant's share of a type, or nil with the error.
func shareOrNil(c flow.TenantControl, err error) (*flow.TenantControl, error) {
	if err != nil {
		return nil, err
	}
	return &c, nil
}
