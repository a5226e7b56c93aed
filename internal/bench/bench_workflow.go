package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Shapes of the workflow bench.
const (
	benchChains     = 1_000
	benchChainSteps = 10
	benchFanOut     = 10_000
	// benchChainsPerCall is how many chains one transaction creates.
	benchChainsPerCall = 100
	// benchSteps is every step of one workflow round: the chains, then
	// one fan-out (a root, its children, one fan-in).
	benchSteps = benchChains*benchChainSteps + benchFanOut + 2
)

func benchTask() store.NewTask {
	return store.NewTask{Type: "noop", Owner: "bench", Input: json.RawMessage(`{}`), InputHash: "-",
		TimeoutSeconds: 60, RetryPolicy: "none", MaxAttempts: 1}
}

// createBenchWorkflows creates one round's workflows: benchChains chains
// of benchChainSteps steps (benchChainsPerCall a transaction, each batch
// in one CreateWorkflows), and one workflow of a root, benchFanOut
// children and one step after them all.
func createBenchWorkflows(ctx context.Context, s *store.Store) error {
	chain := func() store.NewWorkflow {
		steps := make([]store.NewTask, benchChainSteps)
		for i := range steps {
			steps[i] = benchTask()
			key := fmt.Sprintf("s%d", i)
			steps[i].StepKey = &key
			if i > 0 {
				steps[i].Parents = []store.Parent{{Step: i - 1}}
			}
		}
		return store.NewWorkflow{Title: "chain", Owner: "bench", InputHash: "-", Steps: steps}
	}
	for left := benchChains; left > 0; left -= benchChainsPerCall {
		batch := make([]store.NewWorkflow, min(left, benchChainsPerCall))
		for i := range batch {
			batch[i] = chain()
		}
		err := s.Write(ctx, func(tx *store.Tx) error {
			_, err := tx.CreateWorkflows(ctx, batch)
			return err
		})
		if err != nil {
			return err
		}
	}
	steps := make([]store.NewTask, benchFanOut+2)
	last := len(steps) - 1
	for i := range steps {
		steps[i] = benchTask()
		key := fmt.Sprintf("s%d", i)
		steps[i].StepKey = &key
	}
	for i := 1; i < last; i++ {
		steps[i].Parents = []store.Parent{{Step: 0}}
		steps[last].Parents = append(steps[last].Parents, store.Parent{Step: i})
	}
	return s.Write(ctx, func(tx *store.Tx) error {
		_, _, err := tx.CreateWorkflow(ctx, store.NewWorkflow{Title: "fan-out", Owner: "bench", InputHash: "-", Steps: steps})
		return err
	})
}

// runWorkflowBench starts the nodes and alternates, rounds times, a plain
// burn-down of benchSteps noop tasks and a round of workflows of as many
// steps, each timed from its first insert to its last end, and prints the
// rates and their ratio.
func runWorkflowBench(ctx context.Context, apps []*app.App, rounds int) int {
	var ended atomic.Int64
	for _, a := range apps {
		sub := a.Broker.SubscribeInternal(func(c events.TaskChange) bool { return !c.Partial && c.Task.Status.Terminal() }, 1<<16)
		go func() {
			for range sub.C {
				ended.Add(1)
			}
		}()
	}
	for _, a := range apps {
		if err := a.Start(ctx); err != nil {
			fmt.Println("bench:", app.OneLine(err))
			return 1
		}
	}
	s := apps[0].Store
	target := int64(0)
	wait := func() error {
		target += benchSteps
		for ended.Load() < target {
			if err := ctx.Err(); err != nil {
				return err
			}
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	}
	plain := func() error {
		for left := benchSteps; left > 0; left -= 5000 {
			tasks := make([]store.NewTask, min(left, 5000))
			for i := range tasks {
				tasks[i] = benchTask()
			}
			if _, err := s.CreateTasks(ctx, tasks); err != nil {
				return err
			}
		}
		return wait()
	}
	var created time.Duration
	workflows := func() error {
		start := time.Now()
		if err := createBenchWorkflows(ctx, s); err != nil {
			return err
		}
		created = time.Since(start)
		return wait()
	}
	fmt.Printf("workflow bench: %d chains of %d steps and a %d-wide fan-out and fan-in (%d steps) against %d plain tasks, alternated, %d rounds\n",
		benchChains, benchChainSteps, benchFanOut, benchSteps, benchSteps, rounds)
	var sumPlain, sumFlow float64
	for r := 1; r <= rounds; r++ {
		start := time.Now()
		if err := plain(); err != nil {
			return benchFailed(ctx, err)
		}
		p := float64(benchSteps) / time.Since(start).Seconds()
		start = time.Now()
		if err := workflows(); err != nil {
			return benchFailed(ctx, err)
		}
		took := time.Since(start)
		w := float64(benchSteps) / took.Seconds()
		sumPlain, sumFlow = sumPlain+p, sumFlow+w
		fmt.Printf("round %d: plain %.0f tasks/s, workflows %.0f steps/s (%.2fx; creating them took %s of its %s)\n",
			r, p, w, w/p, created.Round(time.Millisecond), took.Round(time.Millisecond))
	}
	fmt.Printf("total: workflows %.0f steps/s against plain %.0f tasks/s end to end on %s = %.2fx (target >= 0.70x)\n",
		sumFlow/float64(rounds), sumPlain/float64(rounds), s.Dialect(), sumFlow/sumPlain)
	return 0
}
