package store

import (
	"errors"
	"fmt"
)

// ErrNotFound is matched by errors.Is for every *NotFoundError.
var ErrNotFound = errors.New("not found")

// NotFoundError names what was not found.
type NotFoundError struct {
	Entity string
	ID     int
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %d not found", e.Entity, e.ID) }

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ErrConflict is matched by errors.Is for every *ConflictError.
var ErrConflict = errors.New("conflict")

// ConflictError is a request that contradicts what is stored, such as an
// idempotency key reused with a different payload.
type ConflictError struct {
	Message string
	// TaskID is the existing task the request collided with, if any.
	TaskID int
}

func (e *ConflictError) Error() string { return e.Message }

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// ErrScheduleMoved is the error of a task created for a schedule slot, or
// of a previous run cancelled for one (CancelTaskForSchedule), on
// condition that the schedule is still at the version its firing read
// (NewTask.ScheduleVersion), when it is not: another node fired the slot
// or moved the schedule on, or it was edited. Nothing was done.
var ErrScheduleMoved = errors.New("the schedule changed since its firing read it")

// CommitUncertain reports whether err is a failed COMMIT: the transaction
// may have committed all the same (the connection died waiting for the
// answer), and then its changes were not published here. A node that
// learns of one re-reads what changed (relay.Listener.Missed).
func CommitUncertain(err error) bool {
	var ce *commitError
	return errors.As(err, &ce)
}
