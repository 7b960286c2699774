package console

import (
	"testing"
	"time"
)

// TestSessionExpiry: a session ends after maxAge however busy, and after
// idle without a request; an ended one is gone for good.
func TestSessionExpiry(t *testing.T) {
	s := &sessions{m: map[[32]byte]*session{}}
	t0 := time.Now()
	id, ok := s.create("team-a", "e2b_x", t0)
	if !ok || s.get(id, t0) == nil {
		t.Fatal("a fresh session is not found")
	}
	// Busy: a request every 30 minutes keeps it until maxAge, not beyond.
	at := t0
	for at.Sub(t0) < maxAge-time.Minute {
		at = at.Add(30 * time.Minute)
		if at.Sub(t0) > maxAge {
			break
		}
		if s.get(id, at) == nil {
			t.Fatalf("the session ended after %v of activity", at.Sub(t0))
		}
	}
	if s.get(id, t0.Add(maxAge+time.Second)) != nil {
		t.Fatal("the session outlived maxAge")
	}
	if s.get(id, t0) != nil {
		t.Fatal("an expired session came back")
	}
	id2, _ := s.create("team-a", "e2b_x", t0)
	if s.get(id2, t0.Add(idle+time.Second)) != nil {
		t.Fatal("an idle session did not end")
	}
	for _, bad := range []string{"", "short", id2[:63], id2 + "0"} {
		if s.get(bad, t0) != nil {
			t.Fatalf("the id %q found a session", bad)
		}
	}
}

// TestSessionBound: at maxSessions, sign-ins are refused until some
// expire; no one signed in is evicted.
func TestSessionBound(t *testing.T) {
	s := &sessions{m: map[[32]byte]*session{}}
	t0 := time.Now()
	first, _ := s.create("t", "k", t0)
	for i := 1; i < maxSessions; i++ {
		if _, ok := s.create("t", "k", t0); !ok {
			t.Fatalf("refused at %d", i)
		}
	}
	if _, ok := s.create("t", "k", t0); ok {
		t.Fatal("a session past maxSessions was created")
	}
	if s.get(first, t0) == nil {
		t.Fatal("a signed-in session was evicted")
	}
	if _, ok := s.create("t", "k", t0.Add(maxAge+time.Minute)); !ok {
		t.Fatal("expired sessions were not swept to make room")
	}
}
