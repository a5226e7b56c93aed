package alert

// OldestWaitingQuery is the evaluator's backlog probe, for plan tests.
var OldestWaitingQuery = oldestWaitingQuery
