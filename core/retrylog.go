package core

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/internal/backoff"
)

// retryLogInterval is how often at most a background loop logs the same
// failure while it retries: a feed that stays down (or is not migrated yet)
// would otherwise fill the log several times a second at first, and every
// 5 s after.
const retryLogInterval = time.Minute

// retryLogCauses bounds the failures remembered: past it, those not logged
// within retryLogInterval are forgotten (and all, if that is not enough).
const retryLogCauses = 64

// retryLog decides which failures of the engine's retried feed operations
// are logged: each cause (the operation and the error's text) at most once
// per retryLogInterval, with the count of its failures not logged since.
type retryLog struct {
	mu     sync.Mutex
	causes map[retryCause]*retryEntry
}

type retryCause struct{ what, err string }

type retryEntry struct {
	logged     time.Time // when the cause was last logged
	suppressed int       // failures of the cause since, not logged
}

// admit reports whether a failure of what with err at now is to be logged,
// and how many failures of the same cause were not logged since the last
// time it was.
func (l *retryLog) admit(now time.Time, what string, err error) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := retryCause{what, err.Error()}
	if en, seen := l.causes[key]; seen {
		if now.Sub(en.logged) < retryLogInterval {
			en.suppressed++
			return 0, false
		}
		suppressed = en.suppressed
		en.logged, en.suppressed = now, 0
		return suppressed, true
	}
	if l.causes == nil {
		l.causes = map[retryCause]*retryEntry{}
	}
	if len(l.causes) >= retryLogCauses {
		for k, en := range l.causes {
			if now.Sub(en.logged) >= retryLogInterval {
				delete(l.causes, k)
			}
		}
		if len(l.causes) >= retryLogCauses {
			clear(l.causes)
		}
	}
	l.causes[key] = &retryEntry{logged: now}
	return 0, true
}

// logRetry logs that the feed operation what failed with err and is retried,
// unless the same failure was logged within retryLogInterval (see
// retryLog). A feed that is not installed gets the hint to migrate it.
func (e *Engine) logRetry(what string, err error, attempt int) {
	suppressed, ok := e.retries.admit(e.cfg.Clock.Now(), what, err)
	if !ok {
		return
	}
	msg := "tide: feed " + what + " failed; retrying"
	if errors.Is(err, feed.ErrNotInstalled) {
		msg += ": " + notMigratedHint
	}
	e.cfg.Logger.Error(msg, "err", err, "attempt", attempt, "not_logged_since", suppressed, "log_interval", retryLogInterval)
}

// retryWait waits the delay before retry attempt: jittered, growing
// exponentially from 50 ms to 5 s. It reports false if ctx ended.
func (e *Engine) retryWait(ctx context.Context, attempt int) bool {
	d := backoff.Delay(attempt, 50*time.Millisecond, 5*time.Second)
	if e.sleep != nil {
		return e.sleep(ctx, d)
	}
	return backoff.Sleep(ctx, d)
}

// backoff logs err (see logRetry) and waits before the retry (see
// retryWait). It reports false if ctx ended.
func (e *Engine) backoff(ctx context.Context, attempt int, what string, err error) bool {
	e.logRetry(what, err, attempt)
	return e.retryWait(ctx, attempt)
}
