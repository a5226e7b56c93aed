package store

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPublishOrder(t *testing.T) {
	t.Parallel()
	t.Run("PublishesInTicketOrderWhateverOrderCommitsEnd", func(t *testing.T) {
		t.Parallel()
		var o publishOrder
		var got []int
		tickets := []uint64{o.take(), o.take(), o.take(), o.take()}
		rec := func(i int) func() { return func() { got = append(got, i) } }
		o.done(tickets[2], rec(2))
		o.done(tickets[1], rec(1))
		require.Empty(t, got, "ticket 0 is still committing")
		o.done(tickets[0], rec(0))
		require.Equal(t, []int{0, 1, 2}, got)
		o.done(tickets[3], rec(3))
		require.Equal(t, []int{0, 1, 2, 3}, got)
	})
	t.Run("AFailedCommitPublishesNothingAndBlocksNoOne", func(t *testing.T) {
		t.Parallel()
		var o publishOrder
		var got []int
		a, b := o.take(), o.take()
		o.done(b, func() { got = append(got, 1) })
		o.done(a, nil)
		require.Equal(t, []int{1}, got)
	})
	t.Run("ConcurrentCommitsAllPublishOnce", func(t *testing.T) {
		t.Parallel()
		var o publishOrder
		var mu sync.Mutex
		seen := map[uint64]int{}
		var last uint64
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					tk := o.take()
					o.done(tk, func() {
						mu.Lock()
						defer mu.Unlock()
						seen[tk]++
						if tk > 0 && tk != last+1 {
							t.Errorf("ticket %d published after %d", tk, last)
						}
						last = tk
					})
				}
			}()
		}
		wg.Wait()
		require.Len(t, seen, 64*50)
	})
}
