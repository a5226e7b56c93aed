package cli

// createMany creates the tasks one createTask at a time: each is
// validated, masked and idempotent on its own. (The bulk createTasks
// mutation replaces this loop once the server has it.)
func (cl *client) createMany(c *cmd, inputs []CreateTaskInput) ([]created, error) {
	out := make([]created, len(inputs))
	for i, in := range inputs {
		resp, err := CreateTask(c.env.Ctx, cl.gql, in)
		if err != nil {
			e := explain(err)
			ae, ok := e.(*apiError)
			if !ok {
				return nil, e
			}
			out[i] = created{err: ae}
			continue
		}
		out[i] = created{task: &resp.CreateTask.TaskFields, created: true}
	}
	return out, nil
}
