package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/tasktype"
)

// checkInput is the input of the review tests' type: it fails (needing a
// review) while Fail is set.
type checkInput struct {
	Fail     bool   `json:"fail"`
	Limit    int    `json:"limit,omitempty"`
	Password string `json:"password,omitempty"`
	Phone    string `json:"phone,omitempty"`
}

// The secrets of "keeper"'s tests: its result says which its handler was
// given, never the values.
const (
	keptPassword = "s3cret-Keep-9"
	keptPhone    = "13812341234"
	newPassword  = "n3w-Secret-7"
)

// registerChecker registers "checker" (four-eyes review of its failures)
// and "plain" (no review policy: its NON_RETRYABLE failures end FAILED).
func registerChecker(r *tasktype.Registry) {
	tasktype.Register(r, "checker", func(ctx context.Context, job *tasktype.Job, in checkInput) error {
		if in.Fail {
			return tasktype.NeedsReview(errors.New("3 of 10 rows refused, over the threshold of 2"), map[string]any{"failedRows": 3, "totalRows": 10})
		}
		return job.SetResult(map[string]any{"ok": true, "limit": in.Limit})
	}, tasktype.WithReview(tasktype.ReviewPolicy{FourEyes: true}))
	tasktype.Register(r, "plain", func(ctx context.Context, job *tasktype.Job, in checkInput) error {
		if in.Fail {
			return tasktype.NonRetryable(errors.New("bad input"))
		}
		return nil
	})
	// "strict" fails NON_RETRYABLE (no review: it ends FAILED) and asks
	// for four eyes, which its replays with an edited input obey.
	tasktype.Register(r, "strict", func(ctx context.Context, job *tasktype.Job, in checkInput) error {
		if in.Fail {
			return tasktype.NonRetryable(errors.New("bad input"))
		}
		return nil
	}, tasktype.WithReview(tasktype.ReviewPolicy{FourEyes: true}))
	// "keeper" needs a review while Fail is set; its result says whether
	// it was given the secrets it was created with, or the new password.
	tasktype.Register(r, "keeper", func(ctx context.Context, job *tasktype.Job, in checkInput) error {
		if in.Fail {
			return tasktype.NeedsReview(errors.New("look at it"), nil)
		}
		return job.SetResult(map[string]any{
			"keptOld": in.Password == keptPassword, "tookNew": in.Password == newPassword,
			"keptPhone": in.Phone == keptPhone, "limit": in.Limit,
		})
	}, tasktype.WithReview(tasktype.ReviewPolicy{}))
}

const reviewFields = `id status availableActions
	review { trigger reason evidence fourEyes submittedBy decision decidedBy decisionReason inputVersion since overdue }
	inputVersions { version input author reason fromInstanceNo diff { path kind before after masked } }
	instances { instanceNo status }`

type reviewView struct {
	ID               string
	Status           string
	AvailableActions []string
	Review           *struct {
		Trigger, Reason, SubmittedBy string
		Evidence                     json.RawMessage
		FourEyes, Overdue            bool
		Decision, DecidedBy          *string
		DecisionReason               *string
		InputVersion                 *int
		Since                        time.Time
	}
	InputVersions []struct {
		Version        int
		Input          json.RawMessage
		Author, Reason string
		FromInstanceNo int
		Diff           []struct {
			Path, Kind    string
			Before, After json.RawMessage
			Masked        bool
		}
	}
	Instances []struct {
		InstanceNo int
		Status     string
	}
}

func (s *secured) reviewOf(t *testing.T, who, id string) reviewView {
	t.Helper()
	var out struct{ Task reviewView }
	s.QueryAs(t, s.tok[who], `query($id: ID!) { task(id: $id) { `+reviewFields+` } }`, map[string]any{"id": id}, &out)
	return out.Task
}

func (s *secured) waitStatus(t *testing.T, who, id, want string) reviewView {
	t.Helper()
	var got reviewView
	apptest.Eventually(t, 30*time.Second, func() (bool, string) {
		got = s.reviewOf(t, who, id)
		return got.Status == want, fmt.Sprintf("task %s is %s, want %s", id, got.Status, want)
	})
	return got
}

func TestReview(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		s := startSecured(t, dsn, app.Options{Register: registerChecker})
		t.Run("FourEyesEditAndRetryWithADiffThatNeverShowsASecret", func(t *testing.T) {
			tk := s.create(t, "alice", map[string]any{"type": "checker", "input": map[string]any{"fail": true, "limit": 2, "password": "hunter2-old"}})
			got := s.waitStatus(t, "alice", tk.ID, "REVIEW_PENDING")
			require.NotNil(t, got.Review)
			require.Equal(t, "NEEDS_REVIEW", got.Review.Trigger)
			require.Contains(t, got.Review.Reason, "over the threshold")
			require.JSONEq(t, `{"failedRows":3,"totalRows":10}`, string(got.Review.Evidence))
			require.True(t, got.Review.FourEyes)
			require.Equal(t, "alice", got.Review.SubmittedBy)
			require.Nil(t, got.Review.Decision)
			require.Equal(t, []string{"CANCEL", "APPROVE_REVIEW", "EDIT_AND_RETRY", "ACCEPT_REVIEW", "REJECT_REVIEW"}, got.AvailableActions)
			require.Len(t, got.InputVersions, 1)

			// The queue: bob, another operator, sees alice's task there.
			var q struct {
				ReviewQueue struct {
					TotalCount int
					Edges      []struct{ Node struct{ ID string } }
				}
				ReviewQueueStats struct {
					Size   int
					Oldest *struct{ ID string }
				}
			}
			s.QueryAs(t, s.tok["bob"], `{ reviewQueue(where: {type: "checker"}) { totalCount edges { node { id } } } reviewQueueStats { size oldest { id } } }`, nil, &q)
			require.Equal(t, 1, q.ReviewQueue.TotalCount)
			require.Equal(t, tk.ID, q.ReviewQueue.Edges[0].Node.ID)
			require.Equal(t, 1, q.ReviewQueueStats.Size)
			require.Equal(t, tk.ID, q.ReviewQueueStats.Oldest.ID)

			// Four eyes: the submitter may not decide; nor may a viewer.
			edit := `mutation($id: ID!, $in: JSON!) { editAndRetry(id: $id, input: $in, reason: "raise the limit") { id status } }`
			newInput := map[string]any{"fail": false, "limit": 5, "password": "hunter2-new"}
			require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok["alice"], edit, map[string]any{"id": tk.ID, "in": newInput})))
			require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok["alice"], `mutation($id: ID!) { approveReview(id: $id) { id } }`, map[string]any{"id": tk.ID})))
			require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok["aliceRO"], `mutation($id: ID!) { rejectReview(id: $id, reason: "no") { id } }`, map[string]any{"id": tk.ID})))
			// An edit the type's schema refuses loses nothing.
			require.Equal(t, "VALIDATION", code(t, s.DoAs(t, s.tok["bob"], edit, map[string]any{"id": tk.ID, "in": map[string]any{"fail": "no"}})))
			require.Equal(t, "REVIEW_PENDING", s.reviewOf(t, "alice", tk.ID).Status)

			var e struct{ EditAndRetry struct{ ID, Status string } }
			s.QueryAs(t, s.tok["bob"], edit, map[string]any{"id": tk.ID, "in": newInput}, &e)
			require.Equal(t, "RETRY_PENDING", e.EditAndRetry.Status)
			done := s.waitStatus(t, "alice", tk.ID, "SUCCESS")
			require.Equal(t, "EDITED", *done.Review.Decision)
			require.Equal(t, "bob", *done.Review.DecidedBy)
			require.Equal(t, "raise the limit", *done.Review.DecisionReason)
			require.Equal(t, 2, *done.Review.InputVersion)
			require.Len(t, done.Instances, 2)
			require.Len(t, done.InputVersions, 2)
			v1, v2 := done.InputVersions[0], done.InputVersions[1]
			require.Equal(t, 1, v1.Version)
			require.Equal(t, "alice", v1.Author)
			require.Equal(t, 2, v2.Version)
			require.Equal(t, "bob", v2.Author)
			require.Equal(t, "raise the limit", v2.Reason)
			require.Equal(t, 2, v2.FromInstanceNo)
			require.Empty(t, v1.Diff)
			diff := map[string]string{}
			for _, c := range v2.Diff {
				diff[c.Path] = fmt.Sprintf("%s %s->%s masked=%v", c.Kind, c.Before, c.After, c.Masked)
			}
			require.Equal(t, map[string]string{
				"/fail":     "CHANGED true->false masked=false",
				"/limit":    "CHANGED 2->5 masked=false",
				"/password": "CHANGED null->null masked=true",
			}, diff)

			// The handler ran with the edited input (its result says so),
			// and no response shows either password.
			var res struct {
				Task struct{ Result json.RawMessage }
			}
			s.QueryAs(t, s.tok["alice"], `query($id: ID!) { task(id: $id) { result } }`, map[string]any{"id": tk.ID}, &res)
			require.JSONEq(t, `{"ok":true,"limit":5}`, string(res.Task.Result))
			whole := s.DoAs(t, s.tok["root"], `query($id: ID!) { task(id: $id) { input `+reviewFields+` logs { edges { node { message fields } } } } auditLogs(where: {taskID: $id}) { edges { node { action actor details } } } }`, map[string]any{"id": tk.ID})
			require.Empty(t, whole.Errors)
			require.NotContains(t, string(whole.Data), "hunter2")

			// The audit names the reviewer.
			var audit struct {
				AuditLogs struct {
					Edges []struct {
						Node struct{ Action, Actor, Outcome string }
					}
				}
			}
			s.QueryAs(t, s.tok["root"], `query($id: ID!) { auditLogs(where: {taskID: $id, action: REVIEW_EDIT}) { edges { node { action actor outcome } } } }`, map[string]any{"id": tk.ID}, &audit)
			var actors []string
			for _, e := range audit.AuditLogs.Edges {
				actors = append(actors, e.Node.Actor+" "+e.Node.Outcome)
			}
			// alice's refused edit, bob's refused one (VALIDATION), bob's edit.
			require.ElementsMatch(t, []string{"alice FAILED", "bob FAILED", "bob OK"}, actors)
		})
		t.Run("AnImportOverItsFailedRowsThresholdIsEditedAndRetried", func(t *testing.T) {
			r, status := importtest.UploadAs(t, s.Server, s.tok["alice"], "c.csv",
				importtest.CSV(importtest.ContactsHeader, importtest.Rows(4, func(i int) bool { return i == 1 || i == 2 }), false),
				"contacts", map[string]any{"maxFailedRows": 1}, "")
			require.Equal(t, http.StatusOK, status, "%+v", r.Errors)
			var up struct{ ImportFile struct{ ID string } }
			require.NoError(t, json.Unmarshal(r.Data, &up))
			id := up.ImportFile.ID
			got := s.waitStatus(t, "alice", id, "REVIEW_PENDING")
			require.Equal(t, "NEEDS_REVIEW", got.Review.Trigger)
			require.Contains(t, got.Review.Reason, "2 of 4 rows were refused, over the threshold of 1")
			var ev importer.ReviewEvidence
			require.NoError(t, json.Unmarshal(got.Review.Evidence, &ev))
			require.Equal(t, 4, ev.TotalCount)
			require.Equal(t, 2, ev.FailedCount)
			require.Equal(t, 2, ev.SuccessCount)
			require.NotEmpty(t, ev.ReportFile)
			var files struct {
				Task struct {
					Review struct {
						Files []struct{ Kind, Filename string }
					}
				}
			}
			s.QueryAs(t, s.tok["bob"], `query($id: ID!) { task(id: $id) { review { files { kind filename } } } }`, map[string]any{"id": id}, &files)
			require.Len(t, files.Task.Review.Files, 2, "the xlsx and CSV error reports")
			for _, f := range files.Task.Review.Files {
				require.Equal(t, "ERROR_REPORT", f.Kind)
			}

			// bob, a reviewer, downloads the error report of alice's import.
			var link struct{ ArtifactDownloadURL struct{ URL string } }
			s.QueryAs(t, s.tok["bob"], `mutation($id: ID!) { artifactDownloadUrl(taskId: $id, kind: ERROR_REPORT, format: CSV) { url } }`, map[string]any{"id": id}, &link)
			resp, err := http.Get(link.ArtifactDownloadURL.URL)
			require.NoError(t, err)
			report, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, 3, strings.Count(strings.TrimSpace(string(report)), "\n")+1, "the header and the two refused rows: %s", report)

			// bob raises the threshold and runs it again.
			var in map[string]any
			require.NoError(t, json.Unmarshal(got.InputVersions[0].Input, &in))
			in["options"] = map[string]any{"maxFailedRows": 5}
			var e struct{ EditAndRetry struct{ Status string } }
			s.QueryAs(t, s.tok["bob"], `mutation($id: ID!, $in: JSON!) { editAndRetry(id: $id, input: $in, reason: "two bad rows are known") { status } }`, map[string]any{"id": id, "in": in}, &e)
			require.Equal(t, "RETRY_PENDING", e.EditAndRetry.Status)
			done := s.waitStatus(t, "alice", id, "SUCCESS")
			require.Len(t, done.Instances, 2)
			require.Equal(t, "FAILED", done.Instances[1].Status, "newest first: %+v", done.Instances)
			require.Len(t, done.InputVersions, 2)
			require.Len(t, done.InputVersions[1].Diff, 1)
			c := done.InputVersions[1].Diff[0]
			require.Equal(t, "/options/maxFailedRows CHANGED 1 5 false", fmt.Sprintf("%s %s %s %s %v", c.Path, c.Kind, c.Before, c.After, c.Masked))
			var res struct{ Task struct{ ResultStatus string } }
			s.QueryAs(t, s.tok["alice"], `query($id: ID!) { task(id: $id) { resultStatus } }`, map[string]any{"id": id}, &res)
			require.Equal(t, "PARTIAL_SUCCESS", res.Task.ResultStatus)
			var audit struct {
				AuditLogs struct {
					Edges []struct{ Node struct{ Actor string } }
				}
			}
			s.QueryAs(t, s.tok["root"], `query($id: ID!) { auditLogs(where: {taskID: $id, action: REVIEW_EDIT}) { edges { node { actor } } } }`, map[string]any{"id": id}, &audit)
			require.Len(t, audit.AuditLogs.Edges, 1)
			require.Equal(t, "bob", audit.AuditLogs.Edges[0].Node.Actor)
		})
		t.Run("TwoReviewersAtOnceOneWins", func(t *testing.T) {
			tk := s.create(t, "alice", map[string]any{"type": "checker", "input": map[string]any{"fail": true}})
			s.waitStatus(t, "alice", tk.ID, "REVIEW_PENDING")
			var wg sync.WaitGroup
			codes := make([]string, 2)
			for i, m := range []string{`approveReview(id: $id, reason: "ok")`, `rejectReview(id: $id, reason: "no")`} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := s.DoAs(t, s.tok[[]string{"bob", "root"}[i]], `mutation($id: ID!) { `+m+` { id } }`, map[string]any{"id": tk.ID})
					if len(r.Errors) > 0 {
						codes[i] = r.Errors[0].Code()
					} else {
						codes[i] = "OK"
					}
				}()
			}
			wg.Wait()
			require.ElementsMatch(t, []string{"OK", "INVALID_TRANSITION"}, codes)
		})
		t.Run("AViewerIsOfferedNoActionAnOperatorTheDecisions", func(t *testing.T) {
			tk := s.create(t, "alice", map[string]any{"type": "checker", "input": map[string]any{"fail": true}})
			s.waitStatus(t, "alice", tk.ID, "REVIEW_PENDING")
			decisions := []string{"CANCEL", "APPROVE_REVIEW", "EDIT_AND_RETRY", "ACCEPT_REVIEW", "REJECT_REVIEW"}
			// alice's read-only token sees her task, and is offered nothing
			// (the engine would refuse each).
			require.Empty(t, s.reviewOf(t, "aliceRO", tk.ID).AvailableActions)
			require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok["aliceRO"], `mutation($id: ID!) { approveReview(id: $id) { id } }`, map[string]any{"id": tk.ID})))
			// bob, an operator, sees it in his tenant's queue, with the decisions.
			require.Equal(t, decisions, s.reviewOf(t, "bob", tk.ID).AvailableActions)
			var q struct {
				ReviewQueue struct {
					Edges []struct {
						Node struct {
							ID               string
							AvailableActions []string
						}
					}
				}
			}
			for who, want := range map[string][]string{"aliceRO": {}, "bob": decisions} {
				s.QueryAs(t, s.tok[who], `{ reviewQueue(where: {type: "checker"}) { edges { node { id availableActions } } } }`, nil, &q)
				found := false
				for _, e := range q.ReviewQueue.Edges {
					if e.Node.ID == tk.ID {
						found = true
						require.Equal(t, want, append([]string{}, e.Node.AvailableActions...), who)
					}
				}
				require.True(t, found, "%s's queue: %+v", who, q.ReviewQueue.Edges)
			}
			// A FAILED task: alice may retry it, her read-only token may not.
			plain := s.create(t, "alice", map[string]any{"type": "plain", "input": map[string]any{"fail": true}})
			require.Equal(t, []string{"RETRY", "REPLAY_WITH_INPUT"}, s.waitStatus(t, "alice", plain.ID, "FAILED").AvailableActions)
			require.Empty(t, s.reviewOf(t, "aliceRO", plain.ID).AvailableActions)
			s.QueryAs(t, s.tok["bob"], `mutation($id: ID!) { rejectReview(id: $id, reason: "no") { id } }`, map[string]any{"id": tk.ID}, nil)
		})
		t.Run("ReplayWithInputObeysFourEyes", func(t *testing.T) {
			tk := s.create(t, "alice", map[string]any{"type": "strict", "input": map[string]any{"fail": true}})
			got := s.waitStatus(t, "alice", tk.ID, "FAILED")
			require.Nil(t, got.Review)
			replay := `mutation($id: ID!) { replayWithInput(id: $id, input: {fail: false}, reason: "fixed") { status } }`
			// The submitter may not replay her own task of a four-eyes type.
			require.Equal(t, "FORBIDDEN", code(t, s.DoAs(t, s.tok["alice"], replay, map[string]any{"id": tk.ID})))
			require.Equal(t, "FAILED", s.reviewOf(t, "alice", tk.ID).Status)
			require.Len(t, s.reviewOf(t, "alice", tk.ID).InputVersions, 1, "a refused replay writes no input version")
			// An admin of her tenant, someone else, may.
			var out struct{ ReplayWithInput struct{ Status string } }
			s.QueryAs(t, s.tok["root"], replay, map[string]any{"id": tk.ID}, &out)
			require.Equal(t, "RETRY_PENDING", out.ReplayWithInput.Status)
			s.waitStatus(t, "alice", tk.ID, "SUCCESS")
			// A type without four eyes: the submitter replays her own.
			p := s.create(t, "alice", map[string]any{"type": "plain", "input": map[string]any{"fail": true}})
			s.waitStatus(t, "alice", p.ID, "FAILED")
			s.QueryAs(t, s.tok["alice"], replay, map[string]any{"id": p.ID}, &out)
			require.Equal(t, "RETRY_PENDING", out.ReplayWithInput.Status)
		})
		t.Run("AnEditThatLeavesAMaskedValueKeepsTheSecret", func(t *testing.T) {
			tk := s.create(t, "alice", map[string]any{"type": "keeper", "input": map[string]any{"fail": true, "limit": 1, "password": keptPassword, "phone": keptPhone}})
			s.waitStatus(t, "alice", tk.ID, "REVIEW_PENDING")
			// The reviewer edits the input as the console shows it: masked.
			var shown struct {
				Task struct{ Input map[string]any }
			}
			s.QueryAs(t, s.tok["bob"], `query($id: ID!) { task(id: $id) { input } }`, map[string]any{"id": tk.ID}, &shown)
			in := shown.Task.Input
			require.Equal(t, "138****1234", in["phone"])
			require.NotEqual(t, keptPassword, in["password"])
			in["fail"] = false
			in["limit"] = 2
			edit := `mutation($id: ID!, $in: JSON!, $why: String!) { editAndRetry(id: $id, input: $in, reason: $why) { status } }`
			s.QueryAs(t, s.tok["bob"], edit, map[string]any{"id": tk.ID, "in": in, "why": "raise the limit"}, nil)
			done := s.waitStatus(t, "alice", tk.ID, "SUCCESS")
			var res struct {
				Task struct{ Result json.RawMessage }
			}
			s.QueryAs(t, s.tok["alice"], `query($id: ID!) { task(id: $id) { result } }`, map[string]any{"id": tk.ID}, &res)
			require.JSONEq(t, `{"keptOld":true,"tookNew":false,"keptPhone":true,"limit":2}`, string(res.Task.Result), "the handler ran with the sealed secrets, not the masks")
			diffOf := func(v reviewView, version int) map[string]string {
				out := map[string]string{}
				for _, c := range v.InputVersions[version-1].Diff {
					out[c.Path] = fmt.Sprintf("%s %s->%s masked=%v", c.Kind, c.Before, c.After, c.Masked)
				}
				return out
			}
			require.Equal(t, map[string]string{"/fail": "CHANGED true->false masked=false", "/limit": "CHANGED 1->2 masked=false"}, diffOf(done, 2), "the masked fields did not change")

			// A second review: a new password replaces the old one; the
			// phone, left masked, is kept.
			tk2 := s.create(t, "alice", map[string]any{"type": "keeper", "input": map[string]any{"fail": true, "password": keptPassword, "phone": keptPhone}})
			s.waitStatus(t, "alice", tk2.ID, "REVIEW_PENDING")
			shown.Task.Input = nil
			s.QueryAs(t, s.tok["bob"], `query($id: ID!) { task(id: $id) { input } }`, map[string]any{"id": tk2.ID}, &shown)
			in = shown.Task.Input
			in["fail"] = false
			in["password"] = newPassword
			s.QueryAs(t, s.tok["bob"], edit, map[string]any{"id": tk2.ID, "in": in, "why": "new password " + newPassword}, nil)
			done2 := s.waitStatus(t, "alice", tk2.ID, "SUCCESS")
			s.QueryAs(t, s.tok["alice"], `query($id: ID!) { task(id: $id) { result } }`, map[string]any{"id": tk2.ID}, &res)
			require.JSONEq(t, `{"keptOld":false,"tookNew":true,"keptPhone":true,"limit":0}`, string(res.Task.Result))
			require.Equal(t, map[string]string{"/fail": "CHANGED true->false masked=false", "/password": "CHANGED null->null masked=true"}, diffOf(done2, 2))

			// Neither secret, old or new, is in clear anywhere.
			for _, id := range []string{tk.ID, tk2.ID} {
				whole := s.DoAs(t, s.tok["root"], `query($id: ID!) { task(id: $id) { input `+reviewFields+` logs { edges { node { message fields } } } } auditLogs(where: {taskID: $id}) { edges { node { action actor details } } } }`, map[string]any{"id": id})
				require.Empty(t, whole.Errors)
				for _, secret := range []string{keptPassword, keptPhone, newPassword} {
					require.NotContains(t, string(whole.Data), secret)
				}
			}
			for _, table := range []string{"tasks", "task_input_versions", "task_logs", "audit_logs", "task_reviews", "task_instances"} {
				rows := dumpRows(t, s.Server, table)
				for _, secret := range []string{keptPassword, keptPhone, newPassword} {
					require.NotContains(t, rows, secret, "table %s", table)
				}
			}
		})
		t.Run("ReplayWithInputForAFailedTaskOfAnyType", func(t *testing.T) {
			tk := s.create(t, "alice", map[string]any{"type": "plain", "input": map[string]any{"fail": true}})
			got := s.waitStatus(t, "alice", tk.ID, "FAILED")
			require.Nil(t, got.Review)
			require.Contains(t, got.AvailableActions, "REPLAY_WITH_INPUT")
			var out struct{ ReplayWithInput struct{ Status string } }
			s.QueryAs(t, s.tok["alice"], `mutation($id: ID!) { replayWithInput(id: $id, input: {fail: false}, reason: "fixed") { status } }`, map[string]any{"id": tk.ID}, &out)
			require.Equal(t, "RETRY_PENDING", out.ReplayWithInput.Status)
			done := s.waitStatus(t, "alice", tk.ID, "SUCCESS")
			require.Len(t, done.InputVersions, 2)
			require.Equal(t, "/fail", done.InputVersions[1].Diff[0].Path)
			require.Equal(t, "CHANGED", done.InputVersions[1].Diff[0].Kind)
			// A task not FAILED cannot be replayed.
			require.Equal(t, "INVALID_TRANSITION", code(t, s.DoAs(t, s.tok["alice"], `mutation($id: ID!) { replayWithInput(id: $id, input: {fail: false}, reason: "again") { id } }`, map[string]any{"id": tk.ID})))
		})
	})
}

// TestReviewDeadlines: a review whose deadline passed gets its policy's
// outcome once, however many passes meet it at once: REJECT ends the task
// FAILED (EXPIRED, audited as the system); ALERT leaves it waiting,
// overdue, for the REVIEW_OVERDUE alert rules.
func TestReviewDeadlines(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, func(t *testing.T, dsn string) {
		register := func(r *tasktype.Registry) {
			for name, on := range map[string]tasktype.DeadlineAction{"late-reject": tasktype.DeadlineReject, "late-alert": tasktype.DeadlineAlert} {
				tasktype.Register(r, name, func(ctx context.Context, job *tasktype.Job, _ struct{}) error {
					return tasktype.NonRetryable(errors.New("the totals differ"))
				}, tasktype.WithReview(tasktype.ReviewPolicy{OnNonRetryable: true, Deadline: time.Millisecond, OnDeadline: on}))
			}
		}
		// The loop never passes by itself during the test: its passes are
		// the test's.
		s := startSecured(t, dsn, app.Options{Register: register, ReviewDeadlines: engine.DeadlinesConfig{Delay: time.Hour, Interval: time.Hour}})
		rejected := s.create(t, "alice", map[string]any{"type": "late-reject"})
		alerted := s.create(t, "alice", map[string]any{"type": "late-alert"})
		s.waitStatus(t, "alice", rejected.ID, "REVIEW_PENDING")
		s.waitStatus(t, "alice", alerted.ID, "REVIEW_PENDING")

		ctx := context.Background()
		var wg sync.WaitGroup
		ran := make([]int, 3)
		for i := range ran {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := s.App.ReviewDeadlines.Pass(ctx)
				require.NoError(t, err)
				ran[i] = n
			}()
		}
		wg.Wait()
		require.Equal(t, 2, ran[0]+ran[1]+ran[2], "each review's outcome once: %v", ran)
		n, err := s.App.ReviewDeadlines.Pass(ctx)
		require.NoError(t, err)
		require.Zero(t, n)

		got := s.reviewOf(t, "alice", rejected.ID)
		require.Equal(t, "FAILED", got.Status)
		require.Equal(t, "EXPIRED", *got.Review.Decision)
		require.Equal(t, "system", *got.Review.DecidedBy)
		require.True(t, got.Review.Overdue)
		var audit struct {
			AuditLogs struct {
				TotalCount int
				Edges      []struct {
					Node struct{ Actor, Outcome string }
				}
			}
		}
		s.QueryAs(t, s.tok["root"], `query($id: ID!) { auditLogs(where: {taskID: $id, action: REVIEW_EXPIRE}) { totalCount edges { node { actor outcome } } } }`, map[string]any{"id": rejected.ID}, &audit)
		require.Equal(t, 1, audit.AuditLogs.TotalCount)
		require.Equal(t, "system", audit.AuditLogs.Edges[0].Node.Actor)

		still := s.reviewOf(t, "alice", alerted.ID)
		require.Equal(t, "REVIEW_PENDING", still.Status)
		require.True(t, still.Review.Overdue)
		require.Nil(t, still.Review.Decision)
		var q struct{ ReviewQueueStats struct{ Size, Overdue int } }
		s.QueryAs(t, s.tok["bob"], `{ reviewQueueStats { size overdue } }`, nil, &q)
		require.Equal(t, 1, q.ReviewQueueStats.Size)
		require.Equal(t, 1, q.ReviewQueueStats.Overdue)
	})
}
