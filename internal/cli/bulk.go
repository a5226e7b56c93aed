package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// createMany is task create --file: one CreateTaskInput per line of a
// JSON-lines file (blank lines and lines starting with # are skipped).
// Each line is answered on its own: a table (or a JSON line) of line
// number, task or error; the exit code is 1 if any line failed. With
// wait, it then follows the tasks created, one after the other.
func createMany(c *cmd, path string, wait bool) error {
	var r io.Reader = c.env.Stdin
	if path != "-" {
		f, err := os.Open(c.env.path(path))
		if err != nil {
			return usageErrorf("--file: %v", err)
		}
		defer f.Close()
		r = f
	}
	var inputs []CreateTaskInput
	var lines []int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 || trimSpace(b)[0] == '#' {
			continue
		}
		var in CreateTaskInput
		if err := json.Unmarshal(b, &in); err != nil {
			return usageErrorf("--file %s line %d: not a CreateTaskInput: %v", path, n, err)
		}
		inputs = append(inputs, in)
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--file %s: %w", path, err)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	results, err := cl.createMany(c, inputs)
	if err != nil {
		return err
	}
	failed := 0
	var ids []string
	for i, res := range results {
		line := lines[i]
		if res.err != nil {
			failed++
		} else {
			ids = append(ids, res.task.Id)
		}
		if c.quiet {
			if res.err == nil {
				fmt.Fprintln(c.env.Stdout, res.task.Id)
			}
			continue
		}
		if c.json {
			out := map[string]any{"line": line, "created": res.created}
			if res.err != nil {
				out["error"] = res.err
			} else {
				out["task"] = res.task
			}
			if err := writeJSON(c.env.Stdout, out); err != nil {
				return err
			}
			continue
		}
		if res.err != nil {
			fmt.Fprintf(c.env.Stdout, "line %d: %s\n", line, res.err)
			continue
		}
		verb := "created"
		if !res.created {
			verb = "existing"
		}
		fmt.Fprintf(c.env.Stdout, "line %d: %s task %s %s %s\n", line, verb, res.task.Id, res.task.Code, res.task.Status)
	}
	if failed > 0 {
		return &exitError{code: ExitFailure, msg: fmt.Sprintf("%d of %d lines were refused", failed, len(results))}
	}
	if wait {
		worst := error(nil)
		for _, id := range ids {
			if err := c.follow(cl, id, false, c.json, c.quiet); err != nil {
				if _, ok := err.(*exitError); !ok {
					return err
				}
				worst = err
			}
		}
		return worst
	}
	return nil
}

// created is one line's answer.
type created struct {
	task    *TaskFields
	created bool
	err     *apiError
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}
