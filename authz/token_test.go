package authz_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/tidetest"
)

// newClock returns a fake clock for keyrings, at a fixed time.
func newClock() *tidetest.Clock {
	return tidetest.NewClock(time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC))
}

func testKey(id string, fill byte) authz.Key {
	return authz.Key{ID: id, Secret: bytes.Repeat([]byte{fill}, 32)}
}

func newKeyring(t testing.TB, clk *tidetest.Clock, current authz.Key, previous ...authz.Key) *authz.Keyring {
	t.Helper()
	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: current, Previous: previous, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// codeOf returns the TokenCode of err, or "" if it has none.
func codeOf(err error) authz.TokenCode {
	var te *authz.TokenError
	if errors.As(err, &te) {
		return te.Code
	}
	return ""
}

// tamper re-encodes a token's payload after edit, keeping the signature.
func tamper(t *testing.T, tok string, edit func(map[string]any)) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	js, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	js, _ = json.Marshal(m)
	parts[2] = base64.RawURLEncoding.EncodeToString(js)
	return strings.Join(parts, ".")
}

func TestTokens(t *testing.T) {
	clk := newClock()
	k1 := testKey("k1", 1)
	kr := newKeyring(t, clk, k1)
	alice := authz.Principal{ID: "alice", Claims: map[string]any{"projects": []string{"p7"}, "org": int64(9007199254740993)}}
	sign := func(kr *authz.Keyring, tok authz.Token) string {
		t.Helper()
		s, err := kr.Sign(tok)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := clk.Now()
	valid := sign(kr, authz.Token{Principal: alice, Expiry: now.Add(10 * time.Minute)})
	other := newKeyring(t, clk, testKey("k9", 9))
	sameIDOtherSecret := newKeyring(t, clk, testKey("k1", 2))
	notYet := sign(kr, authz.Token{Principal: alice, NotBefore: now.Add(time.Minute), Expiry: now.Add(10 * time.Minute)})
	expired := sign(kr, authz.Token{Principal: alice, IssuedAt: now.Add(-time.Hour), Expiry: now.Add(-time.Second)})
	endsNow := sign(kr, authz.Token{Principal: alice, IssuedAt: now.Add(-time.Hour), Expiry: now})
	parts := strings.Split(valid, ".")

	tests := []struct {
		name  string
		token string
		code  authz.TokenCode // "" for a valid token
	}{
		{"valid", valid, ""},
		{"empty", "", authz.CodeTokenMalformed},
		{"oversized", "tide1.k1." + strings.Repeat("A", 5000) + "." + parts[3], authz.CodeTokenTooLarge},
		{"garbage", "\x00\xff not a token", authz.CodeTokenMalformed},
		{"jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", authz.CodeTokenMalformed},
		{"other version", "tide2" + strings.TrimPrefix(valid, "tide1"), authz.CodeTokenMalformed},
		{"three parts", strings.Join(parts[:3], "."), authz.CodeTokenMalformed},
		{"five parts", valid + ".x", authz.CodeTokenMalformed},
		{"bad key id", "tide1.k/1." + parts[2] + "." + parts[3], authz.CodeTokenMalformed},
		{"signature not base64", strings.Join(parts[:3], ".") + ".!!!", authz.CodeTokenMalformed},
		{"forged signature", strings.Join(parts[:3], ".") + "." + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)), authz.CodeTokenSignature},
		{"short signature", strings.Join(parts[:3], ".") + ".AAAA", authz.CodeTokenSignature},
		{"no signature", strings.Join(parts[:3], ".") + ".", authz.CodeTokenSignature},
		{"tampered claims", tamper(t, valid, func(m map[string]any) { m["claims"] = map[string]any{"projects": []string{"p7", "p8"}} }), authz.CodeTokenSignature},
		{"tampered subject", tamper(t, valid, func(m map[string]any) { m["sub"] = "mallory" }), authz.CodeTokenSignature},
		{"tampered expiry", tamper(t, expired, func(m map[string]any) { m["exp"] = now.Add(time.Hour).Unix() }), authz.CodeTokenSignature},
		{"unknown key id", sign(other, authz.Token{Principal: alice, Expiry: now.Add(time.Minute)}), authz.CodeTokenUnknownKey},
		{"known id, other secret", sign(sameIDOtherSecret, authz.Token{Principal: alice, Expiry: now.Add(time.Minute)}), authz.CodeTokenSignature},
		{"expired", expired, authz.CodeTokenExpired},
		{"expires this second", endsNow, authz.CodeTokenExpired},
		{"not yet valid", notYet, authz.CodeTokenNotYetValid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kr.Parse(tt.token)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got.Principal.ID != "alice" || got.KeyID != "k1" || !got.Expiry.Equal(now.Add(10*time.Minute)) {
					t.Fatalf("content %+v", got)
				}
				if s := got.Principal.Strings("projects"); len(s) != 1 || s[0] != "p7" {
					t.Fatalf("projects claim %v", s)
				}
				if s := got.Principal.Strings("org"); len(s) != 1 || s[0] != "9007199254740993" {
					t.Fatalf("a large integer claim lost digits: %v", s)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %+v", got)
			}
			if c := codeOf(err); c != tt.code {
				t.Fatalf("code %q (%v), want %q", c, err, tt.code)
			}
			if !errors.Is(err, authz.ErrUnauthenticated) {
				t.Fatalf("%v does not wrap ErrUnauthenticated", err)
			}
			// VerifyToken (core.TokenVerifier) refuses it the same way.
			if _, _, verr := kr.VerifyToken(context.Background(), tt.token); codeOf(verr) != tt.code {
				t.Fatalf("VerifyToken: %v", verr)
			}
		})
	}

	// The not-yet-valid token becomes valid, and every token expires.
	clk.Advance(time.Minute)
	if _, err := kr.Parse(notYet); err != nil {
		t.Fatalf("at its not-before time: %v", err)
	}
	clk.Advance(9 * time.Minute)
	if _, err := kr.Parse(valid); codeOf(err) != authz.CodeTokenExpired {
		t.Fatalf("after ten minutes: %v", err)
	}
}

func TestTokenSignRefuses(t *testing.T) {
	clk := newClock()
	kr := newKeyring(t, clk, testKey("k1", 1))
	now := clk.Now()
	p := authz.Principal{ID: "u"}
	for name, tok := range map[string]authz.Token{
		"anonymous":     {Expiry: now.Add(time.Minute)},
		"no expiry":     {Principal: p},
		"expiry first":  {Principal: p, Expiry: now.Add(-time.Minute)},
		"too long":      {Principal: p, Expiry: now.Add(25 * time.Hour)},
		"nbf after exp": {Principal: p, NotBefore: now.Add(time.Hour), Expiry: now.Add(time.Minute)},
		"control char":  {Principal: authz.Principal{ID: "a\nb"}, Expiry: now.Add(time.Minute)},
		"empty grant":   {Principal: authz.Principal{ID: "u", Grants: []authz.Grant{{}}}, Expiry: now.Add(time.Minute)},
		"huge claims":   {Principal: authz.Principal{ID: "u", Claims: map[string]any{"x": strings.Repeat("x", 5000)}}, Expiry: now.Add(time.Minute)},
		"unencodable":   {Principal: authz.Principal{ID: "u", Claims: map[string]any{"x": func() {}}}, Expiry: now.Add(time.Minute)},
	} {
		if s, err := kr.Sign(tok); err == nil {
			t.Errorf("%s: signed %s", name, s)
		}
	}
	for name, cfg := range map[string]authz.KeyringConfig{
		"short secret":  {Current: authz.Key{ID: "k", Secret: []byte("short")}},
		"bad id":        {Current: authz.Key{ID: "k 1", Secret: bytes.Repeat([]byte{1}, 32)}},
		"empty id":      {Current: authz.Key{Secret: bytes.Repeat([]byte{1}, 32)}},
		"duplicate ids": {Current: testKey("k", 1), Previous: []authz.Key{testKey("k", 2)}},
	} {
		if _, err := authz.NewKeyring(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTokenGrantsRoundTrip(t *testing.T) {
	clk := newClock()
	kr := newKeyring(t, clk, testKey("k1", 1))
	p := authz.Principal{ID: "u", Grants: []authz.Grant{{Resource: "todos", Conditions: map[string][]string{"project_id": {"p7"}}}}}
	tok, got, err := kr.Mint(p, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Principal.Grants) != 1 || !got.Principal.Grants[0].Covers("todos", map[string][]string{"project_id": {"p7"}}) ||
		got.Principal.Grants[0].Covers("todos", map[string][]string{"project_id": {"p8"}}) {
		t.Fatalf("grants %+v", got.Principal.Grants)
	}
	if !got.Expiry.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("expiry %v", got.Expiry)
	}
	if _, err := kr.Parse(tok); err != nil {
		t.Fatal(err)
	}
}

func TestKeyRotation(t *testing.T) {
	clk := newClock()
	kr := newKeyring(t, clk, testKey("k1", 1))
	old, _, err := kr.Mint(authz.Principal{ID: "u"}, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A second node still on the old configuration, and one configured
	// after the rotation with the old key as previous.
	if err := kr.Rotate(testKey("k2", 2)); err != nil {
		t.Fatal(err)
	}
	if err := kr.Rotate(testKey("k2", 3)); err == nil {
		t.Fatal("rotating to a key id in use was accepted")
	}
	fresh, t2, err := kr.Mint(authz.Principal{ID: "u"}, 10*time.Minute)
	if err != nil || t2.KeyID != "k2" {
		t.Fatalf("after rotation: %v %+v", err, t2)
	}
	restarted := newKeyring(t, clk, testKey("k2", 2), testKey("k1", 1))
	for _, k := range []*authz.Keyring{kr, restarted} {
		for _, tok := range []string{old, fresh} {
			if _, err := k.Parse(tok); err != nil {
				t.Fatalf("after rotation: %v", err)
			}
		}
	}
	// Old tokens stay valid until they expire, then expire like any other.
	clk.Advance(10 * time.Minute)
	if _, err := kr.Parse(old); codeOf(err) != authz.CodeTokenExpired {
		t.Fatalf("old token after its expiry: %v", err)
	}
	if err := kr.Retire("k2"); err == nil {
		t.Fatal("retiring the current key was accepted")
	}
	if err := kr.Retire("k1"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(-10 * time.Minute) // even unexpired, a token of a retired key is refused
	if _, err := kr.Parse(old); codeOf(err) != authz.CodeTokenUnknownKey {
		t.Fatalf("token of a retired key: %v", err)
	}
	if _, err := kr.Parse(fresh); err != nil {
		t.Fatalf("current key: %v", err)
	}
}

func TestRevokePrincipal(t *testing.T) {
	clk := newClock()
	kr := newKeyring(t, clk, testKey("k1", 1))
	mallory, _, _ := kr.Mint(authz.Principal{ID: "mallory"}, 10*time.Minute)
	alice, _, _ := kr.Mint(authz.Principal{ID: "alice"}, 10*time.Minute)
	clk.Advance(time.Second)
	kr.RevokePrincipal("mallory")
	if _, err := kr.Parse(mallory); codeOf(err) != authz.CodeTokenRevoked || !errors.Is(err, authz.ErrUnauthenticated) {
		t.Fatalf("revoked: %v", err)
	}
	if _, err := kr.Parse(alice); err != nil {
		t.Fatalf("another principal: %v", err)
	}
	// A token minted right after the revocation, even on a clock that has
	// not moved, is accepted: issue times are compared in nanoseconds.
	if _, _, err := kr.Mint(authz.Principal{ID: "mallory"}, time.Minute); err != nil {
		t.Fatalf("minted right after the revocation: %v", err)
	}
}

// resign re-encodes a token's payload after edit and signs it with key, as a
// build that knew other fields (or fewer) would have.
func resign(t *testing.T, key authz.Key, tok string, edit func(map[string]any)) string {
	t.Helper()
	parts := strings.Split(tamper(t, tok, edit), ".")
	m := hmac.New(sha256.New, key.Secret)
	m.Write([]byte(strings.Join(parts[:3], ".")))
	parts[3] = base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	return strings.Join(parts, ".")
}

// TestRevocationPrecision: a revocation refuses exactly the tokens issued at
// or before it, to the nanosecond, whether it was made here or applied from
// another node, and a token minted after it is accepted however close the
// two are (the token endpoint never answers token_revoked for a new login).
func TestRevocationPrecision(t *testing.T) {
	key := testKey("k1", 1)
	alice := authz.Principal{ID: "alice"}
	cases := []struct {
		name string
		// before runs before the revocation, after between it and the
		// check; both may move the clock.
		before, after time.Duration
		remote        bool // applied with RevokePrincipalAt at the revocation's time
		mintBefore    bool // the checked token was minted before the revocation
		legacy        bool // the checked token has no iat_ns (an older build's)
		want          authz.TokenCode
	}{
		{name: "minted on a clock standing still", want: ""},
		{name: "minted 1 ns later", after: time.Nanosecond, want: ""},
		{name: "minted 1 ms later", after: time.Millisecond, want: ""},
		{name: "minted 999 ms later", after: 999 * time.Millisecond, want: ""},
		{name: "minted before, same instant", mintBefore: true, want: authz.CodeTokenRevoked},
		{name: "minted 1 ns before", mintBefore: true, before: time.Nanosecond, want: authz.CodeTokenRevoked},
		{name: "minted 1 s before", mintBefore: true, before: time.Second, want: authz.CodeTokenRevoked},
		{name: "remote: minted after", remote: true, after: time.Millisecond, want: ""},
		{name: "remote: minted on a clock standing still", remote: true, want: ""},
		{name: "remote: minted before", remote: true, mintBefore: true, before: time.Millisecond, want: authz.CodeTokenRevoked},
		{name: "legacy token of the revocation's second", legacy: true, mintBefore: true, before: time.Millisecond, want: authz.CodeTokenRevoked},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			clk.Advance(500 * time.Millisecond) // mid-second
			kr := newKeyring(t, clk, key)
			var tok string
			if tc.mintBefore {
				tok, _, _ = kr.Mint(alice, time.Hour)
				clk.Advance(tc.before)
			}
			if tc.remote {
				// Another node revoked at this instant; this keyring applies it.
				other := newKeyring(t, clk, key)
				at := other.RevokePrincipalAt("alice", time.Time{})
				kr.RevokePrincipalAt("alice", at)
			} else {
				kr.RevokePrincipal("alice")
			}
			clk.Advance(tc.after)
			if !tc.mintBefore {
				var err error
				tok, _, err = kr.Mint(alice, time.Hour)
				if err != nil {
					t.Fatalf("Mint: %v", err)
				}
			}
			if tc.legacy {
				tok = resign(t, key, tok, func(m map[string]any) { delete(m, "iat_ns") })
			}
			_, err := kr.Parse(tok)
			if got := codeOf(err); got != tc.want {
				t.Fatalf("Parse: %v (code %q), want code %q", err, got, tc.want)
			}
		})
	}
}

// TestRevokeHooks: RevokePrincipal calls the OnRevoke functions with the
// revocation's time; RevokePrincipalAt does not, and an older revocation
// never replaces a newer one.
func TestRevokeHooks(t *testing.T) {
	clk := newClock()
	kr := newKeyring(t, clk, testKey("k1", 1))
	var got []string
	var at time.Time
	cancel := kr.OnRevoke(func(id string, t time.Time) { got = append(got, id); at = t })
	kr.RevokePrincipal("alice")
	kr.RevokePrincipalAt("bob", time.Time{})
	if strings.Join(got, ",") != "alice" || at.IsZero() {
		t.Fatalf("hooks saw %v at %v", got, at)
	}
	tok, _ := kr.Sign(authz.Token{Principal: authz.Principal{ID: "alice"}, IssuedAt: at.Add(time.Nanosecond), Expiry: at.Add(time.Hour)})
	kr.RevokePrincipalAt("alice", at.Add(-time.Second)) // older: ignored
	if _, err := kr.Parse(tok); err != nil {
		t.Fatalf("an older revocation replaced a newer one: %v", err)
	}
	cancel()
	kr.RevokePrincipal("carol")
	if len(got) != 1 {
		t.Fatalf("a cancelled hook ran: %v", got)
	}
}

func TestNewKey(t *testing.T) {
	a, err := authz.NewKey("a")
	if err != nil || len(a.Secret) != authz.MinSecretBytes {
		t.Fatalf("%v %d", err, len(a.Secret))
	}
	b, _ := authz.NewKey("b")
	if bytes.Equal(a.Secret, b.Secret) {
		t.Fatal("two keys share a secret")
	}
	if _, err := authz.NewKey("a.b"); err == nil {
		t.Fatal("a key id with a dot was accepted")
	}
}

// FuzzParseToken: the parser never panics, refuses with a known code, and
// accepts only what the keyring signed. Seeds: testdata/fuzz/FuzzParseToken
// (valid and near-valid tokens for the fixed key and clock below).
func FuzzParseToken(f *testing.F) {
	clk := newClock()
	kr := newKeyring(f, clk, testKey("k1", 1), testKey("k0", 0))
	known := map[authz.TokenCode]bool{
		authz.CodeTokenMalformed: true, authz.CodeTokenTooLarge: true, authz.CodeTokenUnknownKey: true,
		authz.CodeTokenSignature: true, authz.CodeTokenExpired: true, authz.CodeTokenNotYetValid: true,
		authz.CodeTokenFromFuture: true,
	}
	f.Fuzz(func(t *testing.T, tok string) {
		got, err := kr.Parse(tok)
		if err != nil {
			if !known[codeOf(err)] || !errors.Is(err, authz.ErrUnauthenticated) {
				t.Fatalf("refusal without a known code: %v", err)
			}
			return
		}
		// Accepted: it must be the keyring's own signature over the same
		// payload, and its content must pass the rules Sign enforces.
		if got.Principal.ID == "" || !got.Expiry.After(got.IssuedAt) || !clk.Now().Before(got.Expiry) ||
			got.IssuedAt.Sub(clk.Now()) > authz.DefaultClockSkew {
			t.Fatalf("accepted an invalid token: %+v", got)
		}
		if !strings.HasPrefix(tok, "tide1."+got.KeyID+".") {
			t.Fatalf("key id %q not in %q", got.KeyID, tok)
		}
	})
}

// TestTokenIssuedInFuture: a token whose issue time is more than the
// keyring's ClockSkew ahead of its clock is refused with token_from_future;
// up to ClockSkew ahead (a signing node whose clock runs a little fast) it
// is accepted. Sign refuses to make one.
func TestTokenIssuedInFuture(t *testing.T) {
	key := testKey("k1", 1)
	alice := authz.Principal{ID: "alice"}
	cases := []struct {
		name   string
		skew   time.Duration // the verifier's ClockSkew; 0: the default
		ahead  time.Duration // how far the signer's clock is ahead
		legacy bool          // the token has no iat_ns
		want   authz.TokenCode
	}{
		{name: "same clock", want: ""},
		{name: "signer behind", ahead: -30 * time.Second, want: ""},
		{name: "30 s ahead", ahead: 30 * time.Second, want: ""},
		{name: "exactly the skew ahead", ahead: authz.DefaultClockSkew, want: ""},
		{name: "1 ms past the skew", ahead: authz.DefaultClockSkew + time.Millisecond, want: authz.CodeTokenFromFuture},
		{name: "an hour ahead", ahead: time.Hour, want: authz.CodeTokenFromFuture},
		{name: "a year ahead", ahead: 365 * 24 * time.Hour, want: authz.CodeTokenFromFuture},
		{name: "legacy, 2 s past the skew", ahead: authz.DefaultClockSkew + 2*time.Second, legacy: true, want: authz.CodeTokenFromFuture},
		{name: "legacy, within the skew", ahead: 30 * time.Second, legacy: true, want: ""},
		{name: "5 s skew, 5 s ahead", skew: 5 * time.Second, ahead: 5 * time.Second, want: ""},
		{name: "5 s skew, 6 s ahead", skew: 5 * time.Second, ahead: 6 * time.Second, want: authz.CodeTokenFromFuture},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			kr, err := authz.NewKeyring(authz.KeyringConfig{Current: key, Now: clk.Now, ClockSkew: tc.skew})
			if err != nil {
				t.Fatal(err)
			}
			signerClock := newClock()
			signerClock.Advance(tc.ahead)
			signer := newKeyring(t, signerClock, key)
			tok, _, err := signer.Mint(alice, 10*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if tc.legacy {
				tok = resign(t, key, tok, func(m map[string]any) { delete(m, "iat_ns") })
			}
			_, err = kr.Parse(tok)
			if got := codeOf(err); got != tc.want {
				t.Fatalf("Parse: %v (code %q), want code %q", err, got, tc.want)
			}
			if tc.want != "" && !errors.Is(err, authz.ErrUnauthenticated) {
				t.Fatalf("%v does not wrap ErrUnauthenticated", err)
			}
			// Once the verifier's clock has caught up, it is accepted.
			clk.Advance(tc.ahead)
			if _, err := kr.Parse(tok); err != nil {
				t.Fatalf("after the clock caught up: %v", err)
			}
		})
	}
	kr := newKeyring(t, newClock(), key)
	now := newClock().Now()
	if _, err := kr.Sign(authz.Token{Principal: alice, IssuedAt: now.Add(2 * time.Minute), Expiry: now.Add(time.Hour)}); err == nil {
		t.Fatal("Sign made a token issued 2 minutes ahead")
	}
	if _, err := authz.NewKeyring(authz.KeyringConfig{Current: key, ClockSkew: -time.Second}); err == nil {
		t.Fatal("a negative ClockSkew was accepted")
	}
}

// TestRevocationCoversClockSkew: a revocation covers the tokens minted
// before it by a node whose clock runs ahead (within ClockSkew), and those
// minted after it by a node that had not yet applied it; a token minted by
// a keyring that has applied it is accepted at once, and one issued after
// the revocation's time plus ClockSkew is accepted anyway.
func TestRevocationCoversClockSkew(t *testing.T) {
	key := testKey("k1", 1)
	alice := authz.Principal{ID: "alice"}
	cases := []struct {
		name    string
		ahead   time.Duration // the signer's clock, ahead of the verifier's
		after   bool          // the signer mints after the revocation
		applied bool          // the signer had applied the revocation
		later   time.Duration // how long after the revocation the signer mints
		want    authz.TokenCode
	}{
		{name: "before, same clock", want: authz.CodeTokenRevoked},
		{name: "before, signer 30 s ahead", ahead: 30 * time.Second, want: authz.CodeTokenRevoked},
		{name: "before, signer a skew ahead", ahead: authz.DefaultClockSkew, want: authz.CodeTokenRevoked},
		{name: "before, signer behind", ahead: -30 * time.Second, want: authz.CodeTokenRevoked},
		{name: "after, applied, same clock", after: true, applied: true, want: ""},
		{name: "after, applied, signer 30 s ahead", ahead: 30 * time.Second, after: true, applied: true, want: ""},
		{name: "after, applied, signer behind", ahead: -30 * time.Second, after: true, applied: true, want: ""},
		{name: "after, not yet applied", after: true, later: time.Second, want: authz.CodeTokenRevoked},
		{name: "after, not applied, past the skew", after: true, later: authz.DefaultClockSkew + time.Second, want: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			kr := newKeyring(t, clk, key)
			signerClock := newClock()
			signerClock.Advance(tc.ahead)
			signer := newKeyring(t, signerClock, key)
			var tok string
			mint := func() {
				var err error
				if tok, _, err = signer.Mint(alice, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.after {
				mint()
			}
			at := kr.RevokePrincipalAt("alice", time.Time{})
			if tc.applied {
				signer.RevokePrincipalAt("alice", at)
			}
			clk.Advance(tc.later)
			signerClock.Advance(tc.later)
			if tc.after {
				mint()
			}
			_, err := kr.Parse(tok)
			if got := codeOf(err); got != tc.want {
				t.Fatalf("Parse: %v (code %q), want code %q", err, got, tc.want)
			}
		})
	}
}

// TestRevocationCoversEveryAcceptableToken: seeded, randomized. Signers
// whose clocks are within ClockSkew of the verifier's mint tokens before a
// revocation; however long after it the verifier checks them, none is ever
// accepted. Tokens minted by signers that applied the revocation are
// accepted as long as they are valid.
func TestRevocationCoversEveryAcceptableToken(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 12))
	key := testKey("k1", 1)
	alice := authz.Principal{ID: "alice"}
	skew := int64(authz.DefaultClockSkew)
	for i := range 300 {
		clk := newClock()
		clk.Advance(time.Duration(rng.Int64N(int64(time.Second))))
		kr := newKeyring(t, clk, key)
		signerClock := newClock()
		signerClock.Advance(clk.Now().Sub(newClock().Now()) + time.Duration(rng.Int64N(2*skew+1)-skew))
		signer := newKeyring(t, signerClock, key)
		before, _, err := signer.Mint(alice, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		at := kr.RevokePrincipalAt("alice", time.Time{})
		signer.RevokePrincipalAt("alice", at)
		after, _, err := signer.Mint(alice, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			step := time.Duration(rng.Int64N(int64(20 * time.Minute)))
			clk.Advance(step)
			signerClock.Advance(step)
			if got, err := kr.Parse(before); err == nil {
				t.Fatalf("case %d (seed %d): a token minted before the revocation was accepted %v after it: %+v", i, seed, clk.Now().Sub(time.Unix(0, at.UnixNano())), got)
			}
			if _, err := kr.Parse(after); err != nil && codeOf(err) != authz.CodeTokenExpired && codeOf(err) != authz.CodeTokenFromFuture {
				t.Fatalf("case %d (seed %d): a token minted after the revocation: %v", i, seed, err)
			}
		}
	}
}
