package cli

import (
	"errors"
	"strings"
)

// bulkChunk is how many inputs one createTasks call carries.
const bulkChunk = 500

// createMany creates the tasks with the bulk createTasks mutation, in
// chunks, each input validated, masked and idempotent on its own and
// answered on its own. A server without createTasks (older than it) gets
// one createTask per input instead, with the same answers.
func (cl *client) createMany(c *cmd, inputs []CreateTaskInput) ([]created, error) {
	out := make([]created, 0, len(inputs))
	for start := 0; start < len(inputs); start += bulkChunk {
		chunk := inputs[start:min(start+bulkChunk, len(inputs))]
		resp, err := CreateTasks(c.env.Ctx, cl.gql, chunk)
		if err != nil {
			if start == 0 && noSuchField(err, "createTasks") {
				return cl.createOneByOne(c, inputs)
			}
			return nil, err
		}
		answers := make([]created, len(chunk))
		for _, r := range resp.CreateTasks {
			if r.Index < 0 || r.Index >= len(chunk) {
				return nil, errors.New("createTasks answered for an index it was not given")
			}
			a := created{created: r.Created}
			if r.Error != nil {
				a.err = &apiError{Code: r.Error.Code, Message: r.Error.Message}
			} else if r.Task != nil {
				a.task = &r.Task.TaskFields
			}
			answers[r.Index] = a
		}
		for i, a := range answers {
			if a.task == nil && a.err == nil {
				answers[i].err = &apiError{Message: "no answer for this line"}
			}
		}
		out = append(out, answers...)
	}
	return out, nil
}

// noSuchField reports whether err is the server saying it has no field
// named field (GraphQL validation).
func noSuchField(err error, field string) bool {
	e, ok := explain(err).(*apiError)
	return ok && e.Code == "GRAPHQL_VALIDATION_FAILED" && strings.Contains(e.Message, `"`+field+`"`)
}

// createOneByOne is createMany on a server without createTasks.
func (cl *client) createOneByOne(c *cmd, inputs []CreateTaskInput) ([]created, error) {
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
