package events

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskgraph/taskgraph/ent"
)

// ErrLagged ends a subscription that fell further behind than its buffer
// and backlog allow: it must re-read what it watches and subscribe again.
var ErrLagged = errors.New("subscriber fell behind and was dropped; re-read and subscribe again")

// ErrResyncRequired ends the clients' subscriptions when changes they
// should have received can no longer be replayed (a relay outage too long
// to catch up on): they must re-read what they watch and subscribe again.
var ErrResyncRequired = errors.New("changes were missed and cannot be replayed; re-read and subscribe again")

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
	// Backlog is how many tasks a client subscription (not an internal
	// one) may fall behind by beyond its buffer: past its buffer, changes
	// wait in a backlog that keeps the latest change of each task, in the
	// order the tasks first came, and are handed over as the subscriber
	// reads. A subscription whose backlog would exceed it is dropped with
	// ErrLagged. Log lines are not coalesced: Backlog bounds the lines.
	// 0: no backlog (dropped when its buffer is full).
	Backlog int
	// MaxOrderStates bounds the per-task ordering state the broker keeps
	// (the last version delivered of each recently changed task, used to
	// drop duplicates and restore order). Default: MaxOrderStatesDefault.
	MaxOrderStates int
	// Observe, when set, is called for every change delivered to at least
	// one subscriber (metrics: the lag since its commit). It runs under the
	// broker's lock and must be quick.
	Observe func(TaskChange)
}

// Defaults of Config.
const (
	HoldBackDefault       = 100 * time.Millisecond
	BacklogDefault        = 20000
	MaxOrderStatesDefault = 200000
)

// Broker fans out committed changes to in-process subscribers. Publishing
// never blocks: a subscriber that falls behind has its changes coalesced in
// a bounded backlog, and is dropped with ErrLagged past it.
type Broker struct {
	holdBack time.Duration
	backlog  int
	observe  func(TaskChange)

	mu       sync.Mutex
	closed   bool
	taskSubs map[*Subscription[TaskChange]]struct{}
	// byTask holds the subscriptions to one task, looked up per change
	// instead of filtered one by one.
	byTask  map[int]map[*Subscription[TaskChange]]struct{}
	logSubs map[int]map[*Subscription[*ent.TaskLog]]struct{}
	// lastLog is the newest log line delivered of each task with log
	// subscribers, so that lines re-read after an outage are not sent twice.
	lastLog map[int]int
	seq     sequencer

	published atomic.Int64
	dropped   atomic.Int64
}

// NewBroker returns a running broker.
func NewBroker(cfg Config) *Broker {
	b := &Broker{
		holdBack: cfg.HoldBack,
		backlog:  max(cfg.Backlog, 0),
		observe:  cfg.Observe,
		taskSubs: make(map[*Subscription[TaskChange]]struct{}),
		byTask:   make(map[int]map[*Subscription[TaskChange]]struct{}),
		logSubs:  make(map[int]map[*Subscription[*ent.TaskLog]]struct{}),
		lastLog:  make(map[int]int),
	}
	if b.holdBack <= 0 {
		b.holdBack = HoldBackDefault
	}
	b.seq.maxStates = cfg.MaxOrderStates
	if b.seq.maxStates <= 0 {
		b.seq.maxStates = MaxOrderStatesDefault
	}
	b.seq.init()
	return b
}

var _ Publisher = (*Broker)(nil)

// SetReplayFloor tells the broker that changes first delivered at or after
// floor() (this process's clock) may be published again (a relay re-reading
// after an outage): it then remembers what it delivered since then, so that
// a change republished is not delivered twice. Without it, the broker
// remembers what it delivered in the last seqGeneration.
func (b *Broker) SetReplayFloor(floor func() time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq.floor = floor
}

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

	// Past its buffer, values wait in backlog (nil: none) and a pump
	// goroutine hands them over as the subscriber reads.
	mu      sync.Mutex
	backlog *backlog[T]
	pumping bool
	ended   bool
	done    chan struct{}
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

// end stops the subscription; called with the broker's lock held. What
// waits in its backlog is dropped: an ended subscriber re-reads anyway.
func (s *Subscription[T]) end(err error) {
	s.once.Do(func() {
		if err != nil {
			s.err.Store(&err)
		}
		s.mu.Lock()
		s.ended = true
		pumping := s.pumping
		s.mu.Unlock()
		close(s.done)
		if !pumping {
			close(s.c)
		} // else the pump closes it when it stops
	})
}

// offer hands v over without blocking. It reports false when the
// subscriber must be dropped: its buffer is full and it has no backlog, or
// its backlog is full too.
func (s *Subscription[T]) offer(v T) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return true
	}
	if !s.pumping {
		select {
		case s.c <- v:
			return true
		default:
		}
		if s.backlog == nil {
			return false
		}
	}
	// While the pump runs, everything goes through the backlog: a value
	// sent directly could overtake one the pump is handing over.
	if !s.backlog.push(v) {
		return false
	}
	if !s.pumping {
		s.pumping = true
		go s.pump()
	}
	return true
}

// pump moves the backlog into the channel as the subscriber reads it.
func (s *Subscription[T]) pump() {
	for {
		s.mu.Lock()
		v, ok := s.backlog.pop()
		if !ok || s.ended {
			s.pumping = false
			ended := s.ended
			s.mu.Unlock()
			if ended {
				close(s.c)
			}
			return
		}
		s.mu.Unlock()
		select {
		case s.c <- v:
		case <-s.done:
		}
	}
}

// backlog holds values by key, keeping for each key the latest value at the
// position of the first: per key, order is kept; what a slow subscriber
// skips is intermediate versions of one task, never a task.
type backlog[T any] struct {
	key   func(T) int
	limit int
	order []int
	head  int
	vals  map[int]T
}

func newBacklog[T any](limit int, key func(T) int) *backlog[T] {
	return &backlog[T]{key: key, limit: limit, vals: make(map[int]T)}
}

func (q *backlog[T]) push(v T) bool {
	k := q.key(v)
	if _, ok := q.vals[k]; ok {
		q.vals[k] = v
		return true
	}
	if len(q.vals) >= q.limit {
		return false
	}
	q.vals[k] = v
	q.order = append(q.order, k)
	return true
}

func (q *backlog[T]) pop() (T, bool) {
	for q.head < len(q.order) {
		k := q.order[q.head]
		q.head++
		if v, ok := q.vals[k]; ok {
			delete(q.vals, k)
			if q.head > 1024 && q.head*2 > len(q.order) {
				q.order = append(q.order[:0], q.order[q.head:]...)
				q.head = 0
			}
			return v, true
		}
	}
	q.order, q.head = q.order[:0], 0
	var zero T
	return zero, false
}

func (q *backlog[T]) len() int { return len(q.vals) }

// SubscribeTasks streams the committed task changes for which match returns
// true (nil matches all), in version order per task.
func (b *Broker) SubscribeTasks(match func(TaskChange) bool, buffer int) *Subscription[TaskChange] {
	return b.subscribeTasks(match, buffer, false)
}

// SubscribeInternal is SubscribeTasks for the process's own machinery (a
// worker pool): it also receives partial changes from other nodes, is not
// counted as a subscriber for whom remote changes must be re-read, has no
// backlog (it is dropped when its buffer is full) and is not ended by
// ResyncRequired.
func (b *Broker) SubscribeInternal(match func(TaskChange) bool, buffer int) *Subscription[TaskChange] {
	return b.subscribeTasks(match, buffer, true)
}

// SubscribeTask streams the changes of one task for which match returns
// true (nil matches all). It costs nothing when other tasks change.
func (b *Broker) SubscribeTask(taskID int, match func(TaskChange) bool, buffer int) *Subscription[TaskChange] {
	return subscribe(b, buffer, match, false, changeKey,
		func(s *Subscription[TaskChange]) { addTo(b.byTask, taskID, s) },
		func(s *Subscription[TaskChange]) { removeFrom(b.byTask, taskID, s) })
}

func (b *Broker) subscribeTasks(match func(TaskChange) bool, buffer int, internal bool) *Subscription[TaskChange] {
	return subscribe(b, buffer, match, internal, changeKey,
		func(s *Subscription[TaskChange]) { b.taskSubs[s] = struct{}{} },
		func(s *Subscription[TaskChange]) { delete(b.taskSubs, s) })
}

// SubscribeLogs streams the log lines appended to one task.
func (b *Broker) SubscribeLogs(taskID int, buffer int) *Subscription[*ent.TaskLog] {
	return subscribe(b, buffer, nil, false, func(l *ent.TaskLog) int { return l.ID },
		func(s *Subscription[*ent.TaskLog]) { addTo(b.logSubs, taskID, s) },
		func(s *Subscription[*ent.TaskLog]) {
			removeFrom(b.logSubs, taskID, s)
			if b.logSubs[taskID] == nil {
				delete(b.lastLog, taskID)
			}
		})
}

func changeKey(c TaskChange) int { return c.Task.ID }

// subscribe makes a subscription that add registers and remove forgets,
// both called with the broker's lock held. key names what its backlog
// coalesces.
func subscribe[T any](b *Broker, buffer int, filter func(T) bool, internal bool, key func(T) int, add, remove func(*Subscription[T])) *Subscription[T] {
	c := make(chan T, max(buffer, 1))
	s := &Subscription[T]{C: c, c: c, filter: filter, internal: internal, done: make(chan struct{})}
	if !internal && b.backlog > 0 {
		s.backlog = newBacklog(b.backlog, key)
	}
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
	b.publishLogs(logs, false)
}

// PublishMissedLogs delivers log lines re-read after changes may have been
// missed: only those newer than the newest line delivered of their task.
func (b *Broker) PublishMissedLogs(logs []*ent.TaskLog) {
	b.publishLogs(logs, true)
}

func (b *Broker) publishLogs(logs []*ent.TaskLog, onlyNewer bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.logSubs) == 0 {
		return
	}
	for _, l := range logs {
		subs := b.logSubs[l.TaskID]
		if len(subs) == 0 || (onlyNewer && l.ID <= b.lastLog[l.TaskID]) {
			continue
		}
		if l.ID > b.lastLog[l.TaskID] {
			b.lastLog[l.TaskID] = l.ID
		}
		for s := range subs {
			if !s.offer(l) {
				removeFrom(b.logSubs, l.TaskID, s)
				s.end(ErrLagged)
				b.dropped.Add(1)
			}
		}
		if b.logSubs[l.TaskID] == nil {
			delete(b.lastLog, l.TaskID)
		}
	}
}

// LogTasks returns the tasks whose log lines someone subscribes to.
func (b *Broker) LogTasks() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]int, 0, len(b.logSubs))
	for id := range b.logSubs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// ResyncRequired ends every client subscription (task changes and log
// lines; not internal ones) with ErrResyncRequired: changes they should
// have received were lost and cannot be replayed.
func (b *Broker) ResyncRequired() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.taskSubs {
		if !s.internal {
			delete(b.taskSubs, s)
			s.end(ErrResyncRequired)
		}
	}
	for id, m := range b.byTask {
		for s := range m {
			s.end(ErrResyncRequired)
		}
		delete(b.byTask, id)
	}
	for id, m := range b.logSubs {
		for s := range m {
			s.end(ErrResyncRequired)
		}
		delete(b.logSubs, id)
	}
	clear(b.lastLog)
}

// Stats are counters for metrics.
type Stats struct {
	// TaskSubscribers counts the subscriptions of clients (not internal).
	TaskSubscribers     int
	InternalSubscribers int
	LogSubscribers      int
	// Backlogged counts the changes and lines waiting in backlogs.
	Backlogged int
	Published  int64
	Dropped    int64
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
			st.Backlogged += backlogged(s)
		}
	}
	for _, m := range b.byTask {
		st.TaskSubscribers += len(m)
		for s := range m {
			st.Backlogged += backlogged(s)
		}
	}
	for _, m := range b.logSubs {
		st.LogSubscribers += len(m)
		for s := range m {
			st.Backlogged += backlogged(s)
		}
	}
	return st
}

func backlogged[T any](s *Subscription[T]) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.backlog == nil {
		return 0
	}
	return s.backlog.len()
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

// sequencer restores version order per task and drops versions already
// delivered. It remembers the last delivered version of each task changed
// recently: at least seqGeneration, and since the replay floor when one is
// set; so memory stays bounded by the tasks changed in that window (and by
// maxStates).
type sequencer struct {
	states    map[int]*seqState
	pruned    time.Time
	timers    uint64 // numbers hold-back timers; never reset
	floor     func() time.Time
	maxStates int
}

type seqState struct {
	last int64
	at   time.Time // when last was delivered (this process's clock)
	held map[int64]TaskChange
	// timer releases held changes; timerID names it. A timer that fired
	// while a publisher held the lock and filled the gap runs its callback
	// late, possibly after a new timer took its place; its ID no longer
	// matches and it does nothing.
	timer   *time.Timer
	timerID uint64
}

// seqGeneration is how long the last version of a task is remembered at
// least (more when a replay floor asks for it).
const seqGeneration = 20 * time.Second

func (q *sequencer) init() {
	q.states, q.pruned = make(map[int]*seqState), time.Now()
}

func (q *sequencer) reset() {
	if len(q.states) == 0 {
		return
	}
	for _, st := range q.states {
		if st.timer != nil {
			st.timer.Stop()
		}
	}
	q.init()
}

func (q *sequencer) state(id int) *seqState {
	if time.Since(q.pruned) > seqGeneration/2 || len(q.states) > q.maxStates {
		q.prune(time.Now())
	}
	return q.states[id]
}

// prune forgets the tasks delivered before the window, then, if that is
// not enough, the oldest ones beyond maxStates. (A relay that must replay
// more than it can dedupe this way is past its own resync limit, which is
// far lower, and asks clients to resync instead.)
func (q *sequencer) prune(now time.Time) {
	q.pruned = now
	keep := now.Add(-seqGeneration)
	if q.floor != nil {
		if f := q.floor(); !f.IsZero() && f.Before(keep) {
			keep = f
		}
	}
	for id, st := range q.states {
		if len(st.held) == 0 && st.at.Before(keep) {
			delete(q.states, id)
		}
	}
	if len(q.states) <= q.maxStates {
		return
	}
	type aged struct {
		id int
		at time.Time
	}
	var all []aged
	for id, st := range q.states {
		if len(st.held) == 0 {
			all = append(all, aged{id, st.at})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	for _, a := range all[:max(0, min(len(all), len(q.states)-q.maxStates*3/4))] {
		delete(q.states, a.id)
	}
}

func (q *sequencer) push(c TaskChange, holdBack time.Duration, deliver func(TaskChange), onTimeout func(taskID int, timerID uint64)) {
	id, v := c.Task.ID, c.Task.Version
	st := q.state(id)
	if st == nil {
		st = &seqState{last: v - 1}
		if c.Relayed && !c.Latest {
			st.last = 0
		}
		q.states[id] = st
	}
	switch {
	case v <= st.last:
		return // already delivered (or superseded)
	case v == st.last+1:
		q.deliver(st, c, deliver)
		q.drain(st, deliver)
	case c.Latest:
		// The task's current row: what came before it and is held goes
		// first, in order; the versions in between will not come.
		q.deliverHeldBelow(st, v, deliver)
		delete(st.held, v)
		q.deliver(st, c, deliver)
		q.drain(st, deliver)
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

func (q *sequencer) deliver(st *seqState, c TaskChange, deliver func(TaskChange)) {
	deliver(c)
	st.last, st.at = c.Task.Version, time.Now()
}

// drain delivers the held changes that now follow in order.
func (q *sequencer) drain(st *seqState, deliver func(TaskChange)) {
	for {
		next, ok := st.held[st.last+1]
		if !ok {
			break
		}
		delete(st.held, st.last+1)
		q.deliver(st, next, deliver)
	}
	for v := range st.held {
		if v <= st.last {
			delete(st.held, v)
		}
	}
	if len(st.held) == 0 && st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
}

func (q *sequencer) deliverHeldBelow(st *seqState, below int64, deliver func(TaskChange)) {
	versions := make([]int64, 0, len(st.held))
	for v := range st.held {
		if v < below {
			versions = append(versions, v)
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	for _, v := range versions {
		q.deliver(st, st.held[v], deliver)
		delete(st.held, v)
	}
}

func (q *sequencer) release(id int, timerID uint64, deliver func(TaskChange)) {
	st := q.states[id]
	if st == nil || len(st.held) == 0 || st.timerID != timerID {
		return
	}
	q.deliverHeldBelow(st, 1<<62, deliver)
	st.held, st.timer = nil, nil
}
