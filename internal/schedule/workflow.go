package schedule

import (
	"encoding/json"
	"fmt"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/store"
)

// workflowDef is a schedule's workflow as stored: createWorkflow's
// definition, less its key.
type workflowDef struct {
	Title           string    `json:"title,omitempty"`
	OnParentFailure string    `json:"onParentFailure,omitempty"`
	Steps           []stepDef `json:"steps"`
}

type stepDef struct {
	Key             string          `json:"key"`
	Type            string          `json:"type"`
	Title           string          `json:"title,omitempty"`
	BizID           string          `json:"bizId,omitempty"`
	Input           json.RawMessage `json:"input,omitempty"`
	Priority        *int            `json:"priority,omitempty"`
	TimeoutSeconds  *int            `json:"timeoutSeconds,omitempty"`
	RetryPolicy     *string         `json:"retryPolicy,omitempty"`
	MaxAttempts     *int            `json:"maxAttempts,omitempty"`
	DependsOn       []string        `json:"dependsOn,omitempty"`
	OnParentFailure string          `json:"onParentFailure,omitempty"`
}

func defOf(req engine.WorkflowRequest) workflowDef {
	d := workflowDef{Title: req.Title, OnParentFailure: req.OnParentFailure, Steps: make([]stepDef, len(req.Steps))}
	for i, st := range req.Steps {
		t := st.Task
		d.Steps[i] = stepDef{
			Key: st.Key, Type: t.Type, Title: t.Title, BizID: t.BizID, Input: t.Input,
			Priority: t.Priority, TimeoutSeconds: t.TimeoutSeconds, RetryPolicy: t.RetryPolicy, MaxAttempts: t.MaxAttempts,
			DependsOn: st.DependsOn, OnParentFailure: st.OnParentFailure,
		}
	}
	return d
}

func (d workflowDef) request() engine.WorkflowRequest {
	req := engine.WorkflowRequest{Title: d.Title, OnParentFailure: d.OnParentFailure, Steps: make([]engine.StepRequest, len(d.Steps))}
	for i, st := range d.Steps {
		req.Steps[i] = engine.StepRequest{
			Key: st.Key, DependsOn: st.DependsOn, OnParentFailure: st.OnParentFailure,
			Task: engine.CreateRequest{
				Type: st.Type, Title: st.Title, BizID: st.BizID, Input: st.Input,
				Priority: st.Priority, TimeoutSeconds: st.TimeoutSeconds, RetryPolicy: st.RetryPolicy, MaxAttempts: st.MaxAttempts,
			},
		}
	}
	return req
}

// storedWorkflow is a validated workflow as a schedule stores it: its
// definition with the steps' titles and inputs masked, and the unmasked
// definition sealed when masking changed anything.
func (s *Service) storedWorkflow(req engine.WorkflowRequest, nw store.NewWorkflow) (shown json.RawMessage, sealed []byte, err error) {
	masked := defOf(req)
	masked.Title = nw.Title
	byKey := make(map[string]store.NewTask, len(nw.Steps))
	for _, n := range nw.Steps {
		if n.StepKey != nil {
			byKey[*n.StepKey] = n
		}
	}
	changed := masked.Title != req.Title
	for i := range masked.Steps {
		n := byKey[masked.Steps[i].Key]
		masked.Steps[i].Input = n.Input
		if len(n.InputSealed) > 0 {
			changed = true
		}
		if n.Title != masked.Steps[i].Title {
			masked.Steps[i].Title = n.Title
			changed = true
		}
	}
	if shown, err = json.Marshal(masked); err != nil {
		return nil, nil, err
	}
	if changed {
		plain, err := json.Marshal(defOf(req))
		if err != nil {
			return nil, nil, err
		}
		sealed = s.sealer.Seal(plain)
	}
	return shown, sealed, nil
}

// workflowRequest is the workflow a schedule creates, unsealed; false
// for a schedule that creates a task.
func (s *Service) workflowRequest(sch *ent.Schedule) (engine.WorkflowRequest, bool, error) {
	raw := []byte(sch.Workflow)
	if len(raw) == 0 || string(raw) == "null" {
		return engine.WorkflowRequest{}, false, nil
	}
	if len(sch.WorkflowSealed) > 0 {
		plain, err := s.sealer.Open(sch.WorkflowSealed)
		if err != nil {
			return engine.WorkflowRequest{}, true, fmt.Errorf("schedule %d: unseal workflow: %w", sch.ID, err)
		}
		raw = plain
	}
	var d workflowDef
	if err := json.Unmarshal(raw, &d); err != nil {
		return engine.WorkflowRequest{}, true, fmt.Errorf("schedule %d: read workflow: %w", sch.ID, err)
	}
	return d.request(), true, nil
}
