package events

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"taskgraph/ent"
)

// ErrLagged ends a subscription whose buffer was full when an event came:
// the subscriber fell behind and must re-read what it watches.
var ErrLagged = errors.New("subscriber fell behind and was dropped; re-read and subscribe again")

// ErrClosed ends every subscription when the broker closes.
var ErrClosed = errors.New("event broker closed")

// Config of a Broker.
type Config struct {
	// HoldBack is how long an out-of-order change of a task (version n+2
	// arriving before n+1) is held waiting for its predecessor. Changes of
	// one task are committed in version order under a row lock but may be
	// published from different goroutines; this puts them back in order.
	// Default: HoldBackDefault.
	HoldBack time.Duration
	// Observe, when set, is called for every change delivered to at least
	// one subscriber (metrics: the lag since its commit). It runs under the
	// broker's lock and must be quick.
	Observe func(TaskChange)
}

// HoldBackDefault is the default Config.HoldBack.
const HoldBackDefault = 100 * time.Millisecond

// Broker fans out committed changes to in-process subscribers. Publishing
// never blocks: a subscriber whose buffer is full is dropped with ErrLagged.
type Broker struct {
	holdBack time.Duration
	observe  func(TaskChange)

	mu       sync.Mutex
	closed   bool
	taskSubs map[*Subscription[TaskChange]]struct{}
	// byTask holds the subscriptions to one task, looked up per change
	// instead of filtered one by one.
	byTask  map[int]map[*Subscription[TaskChange]]struct{}
	logSubs map[int]map[*Subscription[*ent.TaskLog]]struct{}
	seq     sequencer

	published atomic.Int64
	dropped   atomic.Int64
}

// NewBroker returns a running broker.
func NewBroker(cfg Config) *Broker {
	b := &Broker{
		holdBack: cfg.HoldBack,
		observe:  cfg.Observe,
		taskSubs: make(map[*Subscription[TaskChange]]struct{}),
		byTask:   make(map[int]map[*Subscription[TaskChange]]struct{}),
		logSubs:  make(map[int]map[*Subscription[*ent.TaskLog]]struct{}),
	}
	if b.holdBack <= 0 {
		b.holdBack = HoldBackDefault
	}
	b.seq.init()
	return b
}

var _ Publisher = (*Broker)(nil)

// Subscription is a bounded stream of events. C is closed when the
// subscription ends; Err then says why (nil after Close).
type Subscription[T any] struct {
	C        <-chan T
	c        chan T
	filter   func(T) bool
	internal bool
	err      atomic.Pointer[error]
	unsub    func()
	once     sync.Once
}

// Err returns why the subscription ended, or nil while it runs or after Close.
func (s *Subscription[T]) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Close ends the subscription. It is safe to call more than once.
func (s *Subscription[T]) Close() { s.unsub() }

// end closes the channel once; called with the broker's lock held.
func (s *Subscription[T]) end(err error) {
	s.once.Do(func() {
		if err != nil {
			s.err.Store(&err)
		}
		close(s.c)
	})
}

// offer sends v without blocking and reports false when the buffer is full.
func (s *Subscription[T]) offer(v T) bool {
	select {
	case s.c <- v:
		return true
	default:
		return false
	}
}

// SubscribeTasks streams the committed task changes for which match returns
// true (nil matches all), in version order per task.
func (b *Broker) SubscribeTasks(match func(TaskChange) bool, buffer int) *Subscription[TaskChange] {
	return b.subscribeTasks(match, buffer, false)
}

// SubscribeInternal is SubscribeTasks for the process's own machinery (a
// worker pool): it also receives partial changes from other nodes, and is
// not counted as a subscriber for whom remote changes must be re-read.
func (b *Broker) SubscribeInternal(match func(TaskChange) bool, buffer int) *Subscription[TaskChange] {
	return b.subscribeTasks(match, buffer, true)
}

// SubscribeTask streams the changes of one task for which match returns
// true (nil matches all). It costs nothing when other tasks change.
func (b *Broker) SubscribeTask(taskID int, match func(TaskChange) bool, buffer int) *Subscription[TaskChange] {
	return subscribe(b, buffer, match, false,
		func(s *Subscription[TaskChange]) { addTo(b.byTask, taskID, s) },
		func(s *Subscription[TaskChange]) { removeFrom(b.byTask, taskID, s) })
}

func (b *Broker) subscribeTasks(match func(TaskChange) bool, buffer int, internal bool) *Subscription[TaskChange] {
	return subscribe(b, buffer, match, internal,
		func(s *Subscription[TaskChange]) { b.taskSubs[s] = struct{}{} },
		func(s *Subscription[TaskChange]) { delete(b.taskSubs, s) })
}

// SubscribeLogs streams the log lines appended to one task.
func (b *Broker) SubscribeLogs(taskID int, buffer int) *Subscription[*ent.TaskLog] {
	return subscribe(b, buffer, nil, false,
		func(s *Subscription[*ent.TaskLog]) { addTo(b.logSubs, taskID, s) },
		func(s *Subscription[*ent.TaskLog]) { removeFrom(b.logSubs, taskID, s) })
}

// subscribe makes a subscription that add registers and remove forgets,
// both called with the broker's lock held.
func subscribe[T any](b *Broker, buffer int, filter func(T) bool, internal bool, add, remove func(*Subscription[T])) *Subscription[T] {
	c := make(chan T, max(buffer, 1))
	s := &Subscription[T]{C: c, c: c, filter: filter, internal: internal}
	s.unsub = func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		remove(s)
		s.end(nil)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.end(ErrClosed)
		return s
	}
	add(s)
	return s
}

// addTo and removeFrom keep the subscriptions to one task.
func addTo[T any](m map[int]map[*Subscription[T]]struct{}, taskID int, s *Subscription[T]) {
	set := m[taskID]
	if set == nil {
		set = make(map[*Subscription[T]]struct{})
		m[taskID] = set
	}
	set[s] = struct{}{}
}

func removeFrom[T any](m map[int]map[*Subscription[T]]struct{}, taskID int, s *Subscription[T]) {
	if set := m[taskID]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(m, taskID)
		}
	}
}

// PublishTasks delivers committed changes to matching subscribers.
func (b *Broker) PublishTasks(changes []TaskChange) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.taskSubs)+len(b.byTask) == 0 {
		// Nobody listens; forget ordering state too, so that a later
		// subscriber starts from whatever comes next.
		b.seq.reset()
		return
	}
	for _, c := range changes {
		if c.Partial {
			// Only internal subscribers take partial changes, and they act
			// on each one alone (a wake-up, a cancel): no ordering needed.
			b.deliverTaskLocked(c)
			continue
		}
		b.seq.push(c, b.holdBack, b.deliverTaskLocked, b.flushHeld)
	}
}

// flushHeld is run by a hold-back timer: the predecessor of held changes
// did not come in time, so deliver them in the order we have.
func (b *Broker) flushHeld(taskID int, timerID uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq.release(taskID, timerID, b.deliverTaskLocked)
}

func (b *Broker) deliverTaskLocked(c TaskChange) {
	b.published.Add(1)
	if b.observe != nil && !c.Partial {
		b.observe(c)
	}
	for s := range b.taskSubs {
		if c.Partial && !s.internal {
			continue
		}
		if s.filter != nil && !s.filter(c) {
			continue
		}
		if !s.offer(c) {
			delete(b.taskSubs, s)
			s.end(ErrLagged)
			b.dropped.Add(1)
		}
	}
	if c.Partial {
		return
	}
	for s := range b.byTask[c.Task.ID] {
		if s.filter != nil && !s.filter(c) {
			continue
		}
		if !s.offer(c) {
			removeFrom(b.byTask, c.Task.ID, s)
			s.end(ErrLagged)
			b.dropped.Add(1)
		}
	}
}

// PublishLogs delivers committed log lines to the subscribers of their task.
func (b *Broker) PublishLogs(logs []*ent.TaskLog) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.logSubs) == 0 {
		return
	}
	for _, l := range logs {
		for s := range b.logSubs[l.TaskID] {
			if !s.offer(l) {
				removeFrom(b.logSubs, l.TaskID, s)
				s.end(ErrLagged)
				b.dropped.Add(1)
			}
		}
	}
}

// Stats are counters for metrics.
type Stats struct {
	// TaskSubscribers counts the subscriptions of clients (not internal).
	TaskSubscribers     int
	InternalSubscribers int
	LogSubscribers      int
	Published           int64
	Dropped             int64
}

// Stats returns the broker's counters.
func (b *Broker) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Stats{Published: b.published.Load(), Dropped: b.dropped.Load()}
	for s := range b.taskSubs {
		if s.internal {
			st.InternalSubscribers++
		} else {
			st.TaskSubscribers++
		}
	}
	for _, m := range b.byTask {
		st.TaskSubscribers += len(m)
	}
	for _, m := range b.logSubs {
		st.LogSubscribers += len(m)
	}
	return st
}

// WantsFullChanges reports whether any client subscribes to task changes or
// logs: only then are other nodes' changes worth re-reading in full.
func (b *Broker) WantsFullChanges() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.logSubs) > 0 || len(b.byTask) > 0 {
		return true
	}
	for s := range b.taskSubs {
		if !s.internal {
			return true
		}
	}
	return false
}

// Close ends every subscription with ErrClosed.
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for s := range b.taskSubs {
		s.end(ErrClosed)
	}
	for _, m := range b.byTask {
		for s := range m {
			s.end(ErrClosed)
		}
	}
	for _, m := range b.logSubs {
		for s := range m {
			s.end(ErrClosed)
		}
	}
	b.taskSubs, b.byTask, b.logSubs = nil, nil, nil
	b.seq.reset()
}

// sequencer restores version order per task. It remembers the last
// delivered version of recently seen tasks in two generations that rotate,
// so memory stays bounded by the tasks changed in the last two periods.
type sequencer struct {
	cur, prev map[int]*seqState
	rotated   time.Time
	timers    uint64 // numbers hold-back timers; never reset
}

type seqState struct {
	last  int64
	held  map[int64]TaskChange
	timer *time.Timer
	// timerID names timer. A timer that fired while a publisher held the
	// lock and filled the gap runs its callback late, possibly after a new
	// timer took its place; its ID no longer matches and it does nothing.
	timerID uint64
}

const seqGeneration = 10 * time.Second

func (q *sequencer) init() {
	q.cur, q.prev, q.rotated = make(map[int]*seqState), make(map[int]*seqState), time.Now()
}

func (q *sequencer) reset() {
	if len(q.cur)+len(q.prev) == 0 {
		return
	}
	for _, m := range []map[int]*seqState{q.cur, q.prev} {
		for _, st := range m {
			if st.timer != nil {
				st.timer.Stop()
			}
		}
	}
	q.init()
}

func (q *sequencer) state(id int) *seqState {
	if time.Since(q.rotated) > seqGeneration {
		// Carry over states still holding changes; forget the rest.
		for tid, st := range q.prev {
			if len(st.held) > 0 {
				if _, ok := q.cur[tid]; !ok {
					q.cur[tid] = st
				}
			}
		}
		q.prev, q.cur, q.rotated = q.cur, make(map[int]*seqState), time.Now()
	}
	if st, ok := q.cur[id]; ok {
		return st
	}
	if st, ok := q.prev[id]; ok {
		q.cur[id] = st
		delete(q.prev, id)
		return st
	}
	return nil
}

func (q *sequencer) push(c TaskChange, holdBack time.Duration, deliver func(TaskChange), onTimeout func(taskID int, timerID uint64)) {
	id, v := c.Task.ID, c.Task.Version
	st := q.state(id)
	if st == nil {
		st = &seqState{last: v - 1}
		if c.Relayed {
			st.last = 0
		}
		q.cur[id] = st
	}
	switch {
	case v <= st.last:
		return // already delivered (or superseded)
	case v == st.last+1:
		deliver(c)
		st.last = v
		for {
			next, ok := st.held[st.last+1]
			if !ok {
				break
			}
			delete(st.held, st.last+1)
			deliver(next)
			st.last++
		}
		if len(st.held) == 0 && st.timer != nil {
			st.timer.Stop()
			st.timer = nil
		}
	default:
		if st.held == nil {
			st.held = make(map[int64]TaskChange)
		}
		st.held[v] = c
		if st.timer == nil {
			q.timers++
			tid := q.timers
			st.timerID = tid
			st.timer = time.AfterFunc(holdBack, func() { onTimeout(id, tid) })
		}
	}
}

func (q *sequencer) release(id int, timerID uint64, deliver func(TaskChange)) {
	st := q.state(id)
	if st == nil || len(st.held) == 0 || st.timerID != timerID {
		return
	}
	versions := make([]int64, 0, len(st.held))
	for v := range st.held {
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	for _, v := range versions {
		deliver(st.held[v])
		st.last = v
	}
	st.held, st.timer = nil, nil
}
