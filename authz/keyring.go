package authz

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Key is one HMAC-SHA256 signing key. Its ID travels in every token it
// signs, so a keyring can hold several keys while they rotate.
type Key struct {
	// ID names the key: 1 to 32 ASCII letters, digits, '-' or '_'. It is
	// not secret.
	ID string
	// Secret is the HMAC key: at least 32 random bytes. Keep it out of
	// source control; every node that verifies tokens needs it.
	Secret []byte
}

// MinSecretBytes is the shortest Key.Secret a keyring accepts: the size of
// the SHA-256 output, below which HMAC-SHA256 is weaker than it needs to be.
const MinSecretBytes = 32

// NewKey returns a key with the given id and a fresh random 32-byte secret.
func NewKey(id string) (Key, error) {
	if err := validKeyID(id); err != nil {
		return Key{}, err
	}
	secret := make([]byte, MinSecretBytes)
	_, _ = rand.Read(secret) // never fails: crypto/rand crashes the program rather than return an error
	return Key{ID: id, Secret: secret}, nil
}

func (k *Key) mac(data []byte) []byte {
	m := hmac.New(sha256.New, k.Secret)
	m.Write(data)
	return m.Sum(nil)
}

func validKeyID(id string) error {
	if id == "" || len(id) > maxKeyIDLen {
		return fmt.Errorf("authz: key id %q: want 1 to %d characters", id, maxKeyIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("authz: key id %q: only letters, digits, '-' and '_'", id)
		}
	}
	return nil
}

func (k Key) validate() error {
	if err := validKeyID(k.ID); err != nil {
		return err
	}
	if len(k.Secret) < MinSecretBytes {
		return fmt.Errorf("authz: key %s: the secret must be at least %d bytes", k.ID, MinSecretBytes)
	}
	return nil
}

// KeyringConfig configures a Keyring. Only Current is required.
type KeyringConfig struct {
	// Current signs new tokens, and verifies them. Required.
	Current Key
	// Previous keys only verify: the keys that signed tokens which may still
	// be in use. After a rotation, keep the former key here until the
	// longest token lifetime has passed, then drop it.
	Previous []Key
	// Now returns the current time. Zero value: time.Now. Tests inject a
	// fake clock.
	Now func() time.Time
	// MaxTokenBytes bounds a token's length; a longer one is refused with
	// ErrTokenTooLarge before any decoding. Zero value means 4096. The
	// protocol's own limit for a token in hello is 8192 bytes.
	MaxTokenBytes int
	// MaxLifetime bounds the lifetime (expiry minus issue time) of the
	// tokens the keyring signs and accepts, and so how long it must
	// remember a revocation. Zero value means 24 h.
	MaxLifetime time.Duration
	// ClockSkew is how far ahead of this keyring's clock a token's issue
	// time may be: the nodes that mint tokens may have clocks a little
	// ahead. A token issued further ahead is refused with
	// ErrTokenIssuedInFuture, and a revocation covers the tokens issued up
	// to ClockSkew after it that were minted without knowing of it, so
	// that it covers every token that can still be accepted. Zero value:
	// DefaultClockSkew.
	ClockSkew time.Duration
}

// DefaultClockSkew is the ClockSkew of a keyring configured without one.
// Servers kept in sync by NTP are milliseconds apart; a minute still
// tolerates a host that lost its sync or a virtual machine resumed with a
// stale clock, while keeping short the time by which a token signed with a
// clock ahead can be accepted before its issue time (a fraction of the 10
// minutes a minted token lives by default).
const DefaultClockSkew = time.Minute

// Keyring signs and verifies channel tokens with HMAC-SHA256. It holds one
// current key, which signs, and any number of previous keys, which only
// verify, so keys rotate without logging anyone out: Rotate to a new key,
// and Retire the old one once its tokens have expired.
//
// Keyring implements core.TokenVerifier (VerifyToken), and core's
// revocation hook (RevokePrincipal). It is safe for concurrent use.
type Keyring struct {
	now         func() time.Time
	maxBytes    int
	maxLifetime time.Duration
	skew        time.Duration

	keys atomic.Pointer[keyset] // replaced whole on Rotate and Retire
	mu   sync.Mutex             // serializes Rotate and Retire

	last atomic.Int64 // the latest issue or revocation time made here, Unix ns (see stamp)

	revMu   sync.RWMutex
	revoked map[string]int64                 // principal id → its latest revocation, Unix ns (see revokedBy)
	hooks   map[*int]func(string, time.Time) // OnRevoke callbacks
}

// keyset is an immutable set of keys.
type keyset struct {
	current *Key
	byID    map[string]*Key
}

// NewKeyring returns a keyring for cfg. It copies the keys' secrets.
func NewKeyring(cfg KeyringConfig) (*Keyring, error) {
	if cfg.MaxTokenBytes < 0 || cfg.MaxLifetime < 0 || cfg.ClockSkew < 0 {
		return nil, errors.New("authz: MaxTokenBytes, MaxLifetime and ClockSkew must not be negative")
	}
	k := &Keyring{
		now:         cfg.Now,
		maxBytes:    cfg.MaxTokenBytes,
		maxLifetime: cfg.MaxLifetime,
		skew:        cfg.ClockSkew,
		revoked:     map[string]int64{},
		hooks:       map[*int]func(string, time.Time){},
	}
	if k.now == nil {
		k.now = time.Now
	}
	if k.maxBytes == 0 {
		k.maxBytes = 4096
	}
	if k.maxLifetime == 0 {
		k.maxLifetime = 24 * time.Hour
	}
	if k.skew == 0 {
		k.skew = DefaultClockSkew
	}
	ks, err := newKeyset(cfg.Current, cfg.Previous)
	if err != nil {
		return nil, err
	}
	k.keys.Store(ks)
	return k, nil
}

func newKeyset(current Key, previous []Key) (*keyset, error) {
	ks := &keyset{byID: map[string]*Key{}}
	for i, key := range append([]Key{current}, previous...) {
		if err := key.validate(); err != nil {
			return nil, err
		}
		if _, dup := ks.byID[key.ID]; dup {
			return nil, fmt.Errorf("authz: key id %s is used twice", key.ID)
		}
		c := &Key{ID: key.ID, Secret: slices.Clone(key.Secret)}
		ks.byID[key.ID] = c
		if i == 0 {
			ks.current = c
		}
	}
	return ks, nil
}

// Rotate makes next the signing key. The former current key keeps verifying
// the tokens it signed until Retire removes it. next's id must be new.
func (k *Keyring) Rotate(next Key) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.keys.Load()
	prev := []Key{*old.current}
	for id, key := range old.byID {
		if id != old.current.ID {
			prev = append(prev, *key)
		}
	}
	ks, err := newKeyset(next, prev)
	if err != nil {
		return err
	}
	k.keys.Store(ks)
	return nil
}

// Retire removes a previous key: tokens it signed are refused from now on
// with ErrTokenUnknownKey. Retiring the current key is an error; retiring an
// unknown id does nothing.
func (k *Keyring) Retire(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.keys.Load()
	if id == old.current.ID {
		return fmt.Errorf("authz: key %s is the current key; rotate first", id)
	}
	if _, ok := old.byID[id]; !ok {
		return nil
	}
	ks := &keyset{current: old.current, byID: make(map[string]*Key, len(old.byID)-1)}
	for kid, key := range old.byID {
		if kid != id {
			ks.byID[kid] = key
		}
	}
	k.keys.Store(ks)
	return nil
}

// Sign returns a token for t, signed with the current key. t.Principal must
// not be anonymous, t.Expiry must be after t.IssuedAt (zero: now) and
// NotBefore, the lifetime at most MaxLifetime, and t.IssuedAt at most
// ClockSkew ahead of now (for a token valid later, set NotBefore). The
// token records the latest revocation of its principal this keyring knows
// of, so that revocation does not cover it.
func (k *Keyring) Sign(t Token) (string, error) {
	if t.IssuedAt.IsZero() {
		t.IssuedAt = k.stamp(time.Time{})
	}
	now := k.now()
	if t.IssuedAt.Sub(now) > k.skew {
		return "", fmt.Errorf("authz: cannot sign: IssuedAt is more than ClockSkew (%v) ahead of now; set NotBefore for a token valid later", k.skew)
	}
	p, err := newPayload(t, now)
	if err != nil {
		return "", err
	}
	k.revMu.RLock()
	p.Rev = k.revoked[p.Sub]
	k.revMu.RUnlock()
	if time.Duration(p.Exp-p.Iat)*time.Second > k.maxLifetime {
		return "", fmt.Errorf("authz: cannot sign: the lifetime exceeds MaxLifetime (%v)", k.maxLifetime)
	}
	tok, err := encodeToken(k.keys.Load().current, p)
	if err != nil {
		return "", err
	}
	if len(tok) > k.maxBytes {
		return "", fmt.Errorf("authz: cannot sign: the token would be %d bytes, above MaxTokenBytes %d: carry fewer claims", len(tok), k.maxBytes)
	}
	return tok, nil
}

// Mint signs a token for p valid from now for ttl and returns it with its
// content (whose Expiry tells the client when to refresh).
//
// It records the latest revocation of p this keyring has recorded (made
// here or applied with RevokePrincipalAt), so a token minted after a
// revocation is never taken for one it revoked, however close the two are.
func (k *Keyring) Mint(p Principal, ttl time.Duration) (string, Token, error) {
	now := k.stamp(time.Time{})
	t := Token{Principal: p, IssuedAt: now, Expiry: now.Add(ttl)}
	tok, err := k.Sign(t)
	if err != nil {
		return "", Token{}, err
	}
	t, err = k.Parse(tok)
	return tok, t, err
}

// Parse verifies a token and returns its content. Checks run cheapest
// first, and nothing is decoded before the size and the MAC are checked.
// Every refusal wraps one of the ErrToken… values (and so
// ErrUnauthenticated).
func (k *Keyring) Parse(tok string) (Token, error) {
	if tok == "" {
		return Token{}, fmt.Errorf("%w: empty", ErrTokenMalformed)
	}
	if len(tok) > k.maxBytes {
		return Token{}, fmt.Errorf("%w: %d bytes, at most %d", ErrTokenTooLarge, len(tok), k.maxBytes)
	}
	kid, signed, payloadB64, macB64, err := splitToken(tok)
	if err != nil {
		return Token{}, err
	}
	key := k.keys.Load().byID[kid]
	if key == nil {
		return Token{}, fmt.Errorf("%w: key id %s", ErrTokenUnknownKey, kid)
	}
	if err := checkMAC(key, signed, macB64); err != nil {
		return Token{}, err
	}
	p, err := decodePayload(payloadB64)
	if err != nil {
		return Token{}, err
	}
	if time.Duration(p.Exp-p.Iat)*time.Second > k.maxLifetime {
		return Token{}, fmt.Errorf("%w: the lifetime exceeds MaxLifetime", ErrTokenMalformed)
	}
	nowT := k.now()
	now := nowT.Unix()
	switch {
	case now >= p.Exp:
		return Token{}, fmt.Errorf("%w: at %s", ErrTokenExpired, time.Unix(p.Exp, 0).UTC().Format(time.RFC3339))
	case now < p.Nbf:
		return Token{}, fmt.Errorf("%w: until %s", ErrTokenNotYetValid, time.Unix(p.Nbf, 0).UTC().Format(time.RFC3339))
	case p.Iat-now > int64(k.skew/time.Second)+1 || p.issuedNS()-nowT.UnixNano() > int64(k.skew):
		// (The first test keeps the second's arithmetic from overflowing.)
		return Token{}, fmt.Errorf("%w: issued at %s, more than %v ahead of this server's clock", ErrTokenIssuedInFuture,
			time.Unix(p.Iat, 0).UTC().Format(time.RFC3339), k.skew)
	}
	k.revMu.RLock()
	at, revoked := k.revoked[p.Sub]
	k.revMu.RUnlock()
	if revoked && k.revokedBy(p, at) {
		return Token{}, fmt.Errorf("%w: issued before the principal's access was revoked", ErrTokenRevoked)
	}
	return p.token(kid), nil
}

// revokedBy reports whether the revocation at (Unix ns) covers the token:
// one signed by a keyring that had recorded it (rev at or after it) is
// not covered, whatever its issue time; any other is covered if it was
// issued at most ClockSkew after the revocation. Tokens further ahead than
// that are refused anyway (ErrTokenIssuedInFuture) until the clock
// reaches them, and by then their issue time says they came after the
// revocation, up to the clock difference ClockSkew tolerates. So a
// revocation made now covers every token that may still be accepted and
// was signed without knowing of it, including one minted a moment before
// it by a node whose clock runs ahead.
func (k *Keyring) revokedBy(p *payload, at int64) bool {
	return p.Rev < at && p.issuedNS() <= at+int64(k.skew)
}

// VerifyToken implements core.TokenVerifier: it parses tok and returns its
// principal and expiry.
func (k *Keyring) VerifyToken(_ context.Context, tok string) (Principal, time.Time, error) {
	t, err := k.Parse(tok)
	if err != nil {
		return Anonymous, time.Time{}, err
	}
	return t.Principal, t.Expiry, nil
}

// RevokePrincipal refuses, from now on, every token issued to the principal
// with this id up to now (ErrTokenRevoked), and those issued up to
// ClockSkew later by a keyring that had not recorded the revocation (a
// node whose clock runs ahead, or that had not heard of it yet). Tokens
// signed afterwards by this keyring, or by another that applied the
// revocation, are accepted at once, even a nanosecond later, so stop
// issuing them first if the principal is to stay out. core's Engine.Revoke calls it. The keyring
// remembers a revocation for MaxLifetime, after which every token it covered
// has expired anyway.
//
// The functions registered with OnRevoke are called with the revocation, so
// an engine can carry it to the other nodes of a cluster (core.Engine does
// when its feed implements feed.Revocations); RevokePrincipalAt applies one
// received from elsewhere without calling them.
func (k *Keyring) RevokePrincipal(id string) {
	at := k.RevokePrincipalAt(id, time.Time{})
	k.revMu.RLock()
	hooks := make([]func(string, time.Time), 0, len(k.hooks))
	for _, h := range k.hooks {
		hooks = append(hooks, h)
	}
	k.revMu.RUnlock()
	for _, h := range hooks {
		h(id, at)
	}
}

// RevokePrincipalAt refuses every token issued to the principal with this id
// at or before at (zero: now), and those issued up to ClockSkew after it by
// a keyring that had not recorded the revocation; it returns the time
// recorded. A later revocation of the same principal replaces an earlier
// one; an earlier one is ignored. Tokens this keyring signs afterwards
// record it and are not covered. It does not call the OnRevoke functions:
// it is how a revocation made on another node is applied.
func (k *Keyring) RevokePrincipalAt(id string, at time.Time) time.Time {
	at = k.stamp(at)
	ns := at.UnixNano()
	k.revMu.Lock()
	defer k.revMu.Unlock()
	// A revocation covers tokens issued up to ClockSkew after it, which
	// have all expired MaxLifetime later.
	horizon := k.now().Add(-k.maxLifetime - k.skew).UnixNano()
	for p, t := range k.revoked {
		if t < horizon {
			delete(k.revoked, p)
		}
	}
	if ns > k.revoked[id] {
		k.revoked[id] = ns
	}
	return at
}

// OnRevoke registers fn to be called, on the goroutine of the call, after
// each RevokePrincipal with the principal's id and the revocation's time.
// It returns a function that unregisters fn.
func (k *Keyring) OnRevoke(fn func(principalID string, at time.Time)) (cancel func()) {
	key := new(int)
	k.revMu.Lock()
	k.hooks[key] = fn
	k.revMu.Unlock()
	return func() {
		k.revMu.Lock()
		delete(k.hooks, key)
		k.revMu.Unlock()
	}
}

// stamp returns a time for an issue or a revocation made here: now, moved
// just after the latest time stamp handed out before if it is not after it,
// so that the issue and revocation times of one keyring never collide,
// whatever the clock's resolution (a fake clock that stands still
// included). A given at (a revocation applied from elsewhere) is returned
// as it is and moves nothing: a node whose clock runs ahead must not push
// this keyring's issue times into the future.
func (k *Keyring) stamp(at time.Time) time.Time {
	if !at.IsZero() {
		return at
	}
	ns := k.now().UnixNano()
	for {
		last := k.last.Load()
		next := max(ns, last+1)
		if k.last.CompareAndSwap(last, next) {
			return time.Unix(0, next)
		}
	}
}
