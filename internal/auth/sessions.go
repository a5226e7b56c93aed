package auth

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Long-lived connections (websockets, SSE streams) authenticate once, when
// they open; their credentials may be revoked while they stay open. Watch
// checks them again whenever the token file changes (polled while any
// connection holds credentials) and ends them when a JWT expires, and
// Check lets a connection check them before each operation it runs.

// ReloadIntervalDefault is how often the token file is looked at while
// connections hold credentials (Config.ReloadInterval).
const ReloadIntervalDefault = time.Second

type credentialKey struct{}

// WithCredential returns ctx recording the Authorization value a request
// authenticated with (Middleware does it), so that a connection opened by
// the request can have it checked again later.
func WithCredential(ctx context.Context, authorization string) context.Context {
	return context.WithValue(ctx, credentialKey{}, authorization)
}

// Credential returns what WithCredential recorded.
func Credential(ctx context.Context) string {
	s, _ := ctx.Value(credentialKey{}).(string)
	return s
}

// sessions tells held connections that the credentials may have changed.
type sessions struct {
	mu       sync.Mutex
	changed  chan struct{} // closed at the next change, then replaced
	holders  int
	stopPoll chan struct{} // closes to stop the poller
	pollDone chan struct{} // closed by the poller when it stops
}

func (a *Authenticator) changedCh() <-chan struct{} {
	a.sess.mu.Lock()
	defer a.sess.mu.Unlock()
	if a.sess.changed == nil {
		a.sess.changed = make(chan struct{})
	}
	return a.sess.changed
}

// credentialsChanged wakes every watcher (the token file was read again).
func (a *Authenticator) credentialsChanged() {
	a.sess.mu.Lock()
	defer a.sess.mu.Unlock()
	if a.sess.changed != nil {
		close(a.sess.changed)
	}
	a.sess.changed = make(chan struct{})
}

// hold counts a watcher; the first starts polling the token file.
func (a *Authenticator) hold() {
	a.sess.mu.Lock()
	defer a.sess.mu.Unlock()
	if a.sess.holders++; a.sess.holders > 1 || a.tokens == nil {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	a.sess.stopPoll, a.sess.pollDone = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(a.reloadEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				a.tokens.refresh()
			}
		}
	}()
}

// release uncounts a watcher; the last stops the polling.
func (a *Authenticator) release() {
	a.sess.mu.Lock()
	a.sess.holders--
	var stop, done chan struct{}
	if a.sess.holders == 0 && a.sess.stopPoll != nil {
		stop, done = a.sess.stopPoll, a.sess.pollDone
		a.sess.stopPoll, a.sess.pollDone = nil, nil
	}
	a.sess.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// Check reports whether authorization still authenticates as v: an
// *UnauthenticatedError when it no longer does (its token was removed from
// the token file, its JWT expired) or now names someone else or another
// role or tenant (the token file changed the line). Always nil on an open
// server.
func (a *Authenticator) Check(authorization string, v Viewer) error {
	if a.Open() {
		return nil
	}
	now, err := a.Authenticate(authorization)
	if err != nil {
		var ue *UnauthenticatedError
		if errors.As(err, &ue) {
			return &UnauthenticatedError{Reason: "the credentials are no longer valid: " + ue.Reason}
		}
		return err
	}
	if !sameViewer(now, v) {
		return &UnauthenticatedError{Reason: "the credentials changed (user, role or tenant); connect again"}
	}
	return nil
}

// sameViewer compares identities and roles, not expiry times.
func sameViewer(a, b Viewer) bool {
	return a.Identity() == b.Identity() && a.Role == b.Role && slices.Equal(a.Types, b.Types)
}

// Watch calls revoked (once, from another goroutine) as soon as
// authorization stops authenticating as v: at once if it already has, when
// the token file changes so that Check fails, and when v's JWT expires. The
// connection holding it ends (or is told) then. stop ends the watch; call it
// when the connection ends, revoked or not. On an open server nothing is
// ever revoked.
func (a *Authenticator) Watch(authorization string, v Viewer, revoked func(error)) (stop func()) {
	if a.Open() {
		return func() {}
	}
	a.hold()
	done := make(chan struct{})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			a.release()
		})
	}
	var expiry <-chan time.Time
	var timer *time.Timer
	if !v.Expires.IsZero() {
		timer = time.NewTimer(time.Until(v.Expires))
		expiry = timer.C
	}
	go func() {
		if timer != nil {
			defer timer.Stop()
		}
		for {
			changed := a.changedCh()
			// Checked after taking the channel: a change from here on
			// closes it.
			if err := a.Check(authorization, v); err != nil {
				revoked(err)
				return
			}
			select {
			case <-done:
				return
			case <-expiry:
				revoked(&UnauthenticatedError{Reason: "the token has expired"})
				return
			case <-changed:
			}
		}
	}()
	return stop
}

// Holds reports whether v's credentials still stand, for a credential of
// its own made for v earlier (a download link): nil on an open server and
// for a viewer the token file still names with the same role and tenant;
// an *UnauthenticatedError when it no longer does (its line removed, its
// role or tenant changed). A JWT cannot be looked up again: what was made
// for it never outlives its expiry (the caller bounds it by v.Expires).
func (a *Authenticator) Holds(v Viewer) error {
	if a.Open() {
		return nil
	}
	switch v.Source {
	case SourceJWT:
		if a.jwt != nil {
			return nil
		}
	case SourceToken:
		if a.tokens != nil && a.tokens.holds(func(w Viewer) bool { return sameViewer(a.promote(w), v) }) {
			return nil
		}
	}
	return &UnauthenticatedError{Reason: "the credentials are no longer valid (revoked, or their role or tenant changed)"}
}
