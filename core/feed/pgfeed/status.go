package pgfeed

// SequencerRole is a feed's place in the election of the database's
// sequencer (see StartSequencer).
type SequencerRole int

// Sequencer roles.
const (
	// SequencerOff: the feed is not a candidate (it never tailed and
	// StartSequencer was not called), or it is closed.
	SequencerOff SequencerRole = iota
	// SequencerStandby: the feed is a candidate and another session holds
	// the role; it retries the lock and takes over when that session ends.
	SequencerStandby
	// SequencerLeader: the feed holds the role and gives committed changes
	// their positions.
	SequencerLeader
)

// String returns "off", "standby" or "leader".
func (r SequencerRole) String() string {
	switch r {
	case SequencerOff:
		return "off"
	case SequencerStandby:
		return "standby"
	case SequencerLeader:
		return "leader"
	}
	return "invalid"
}

// MarshalText implements encoding.TextMarshaler.
func (r SequencerRole) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// SequencerStatus is a snapshot of a feed's part in the sequencer
// election, for metrics and health pages.
type SequencerStatus struct {
	Role SequencerRole `json:"role"`
	// PID is the Postgres backend of the connection that holds the role's
	// lock while Role is SequencerLeader, else 0:
	// pg_terminate_backend(PID) forces a failover.
	PID uint32 `json:"pid,omitempty"`
	// Terms counts the times this feed took the role (failovers to it,
	// the first term included).
	Terms int64 `json:"terms"`
	// Steps counts the sequencing steps of this feed's terms that gave
	// positions; Sequenced, the changes they gave positions to.
	Steps     int64 `json:"steps"`
	Sequenced int64 `json:"sequenced"`
	// WALStream reports whether the leader's term reads the WAL stream to
	// learn of new changes at once (see Options.PollOnly); false while it
	// polls. WALWakeups counts the looks the stream started.
	WALStream  bool  `json:"wal_stream"`
	WALWakeups int64 `json:"wal_wakeups"`
}

// SequencerStatus returns the feed's sequencer role and counters. It reads
// counters only (no I/O) and is safe for concurrent use.
func (f *Feed) SequencerStatus() SequencerStatus {
	f.mu.Lock()
	candidate := f.sequencerOn && !f.closed
	f.mu.Unlock()
	st := SequencerStatus{
		Terms:      f.sequencerTerms.Load(),
		Steps:      f.sequencerSteps.Load(),
		Sequenced:  f.sequenced.Load(),
		WALWakeups: f.walWakeups.Load(),
	}
	if w := f.waker.Load(); w != nil {
		st.WALStream = w.live.Load()
	}
	switch {
	case f.sequencing.Load():
		st.Role, st.PID = SequencerLeader, f.sequencerPID.Load()
	case candidate:
		st.Role = SequencerStandby
	}
	return st
}
